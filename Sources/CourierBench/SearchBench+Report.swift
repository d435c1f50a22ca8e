import Foundation

/// What `courier bench --pattern search` prints: its figures as text, or as JSON.
extension SearchBench {
    static func milliseconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) * 1000 + Double(duration.components.attoseconds) / 1e15
    }

    /// The nearest-rank percentile.
    static func percentile(_ values: [Double], _ p: Double) -> Double {
        let sorted = values.sorted()
        guard !sorted.isEmpty else { return 0 }
        let rank = Int((p / 100 * Double(sorted.count)).rounded(.up)) - 1
        return sorted[min(sorted.count - 1, max(0, rank))]
    }

    static func format(_ load: Load) -> String {
        String(format: "%.0f messages/s, %.1f s, %.1f MB", load.perSecond, load.seconds, Double(load.bytes) / 1e6)
    }

    static func text(_ result: Result) -> String {
        var lines = [
            "search bench on \(result.backend): \(result.messages) messages (mixed Chinese and English)",
            "",
            "load (group commit, closed loop)   messages/s     seconds   database MB",
        ]
        for (index, load) in [
            (Index.none, result.withoutIndex), (.inCommit, result.inCommit), (.deferred, result.withIndex),
        ] {
            lines.append(
                index.name.padding(toLength: 34, withPad: " ", startingAt: 0)
                    + String(format: "%11.0f %11.1f %13.1f", load.perSecond, load.seconds, Double(load.bytes) / 1e6)
            )
        }
        let ratio = result.withIndex.perSecond / max(1, result.withoutIndex.perSecond)
        let inCommitRatio = result.inCommit.perSecond / max(1, result.withoutIndex.perSecond)
        let perMessage = Double(result.withIndex.bytes - result.withoutIndex.bytes) / Double(max(1, result.messages))
        lines.append(
            String(
                format: "throughput with / without: %.2f (in the transaction: %.2f)   index bytes per message: %.0f",
                ratio,
                inCommitRatio,
                perMessage
            )
        )
        if let figures = result.withIndex.indexer {
            lines.append(
                String(
                    format:
                        "index beside the commit: %d messages in %d transactions, longest wait %.0f ms, %d over 1 s, %d swept",
                    figures.indexed,
                    figures.batches,
                    Self.milliseconds(figures.maxLag),
                    figures.lateOverOneSecond,
                    figures.swept
                )
            )
        }
        lines.append("")
        lines.append("first page (20 hits)   search p50     p99   hits/page   LIKE p50    LIKE/search (p50)")
        for (kind, _) in Self.kinds {
            let search = result.search[kind] ?? []
            let like = result.like[kind] ?? []
            let (p50, p99, likeP50) = (
                Self.percentile(search, 50), Self.percentile(search, 99), Self.percentile(like, 50)
            )
            lines.append(
                kind.padding(toLength: 22, withPad: " ", startingAt: 0)
                    + String(
                        format: "%8.2f ms %7.2f ms %9.1f %9.1f ms %12.0f×",
                        p50,
                        p99,
                        result.hits[kind] ?? 0,
                        likeP50,
                        likeP50 / max(0.001, p50)
                    )
            )
        }
        let all = result.search.values.flatMap { $0 }
        lines.append(
            String(
                format: "all kinds: search p50 %.2f ms, p99 %.2f ms over %d searches",
                Self.percentile(all, 50),
                Self.percentile(all, 99),
                all.count
            )
        )
        return lines.joined(separator: "\n")
    }

    static func json(_ result: Result) throws -> String {
        var object: [String: Any] = [
            "backend": result.backend,
            "messages": result.messages,
            "load_without_index_per_second": result.withoutIndex.perSecond,
            "load_with_index_per_second": result.withIndex.perSecond,
            "load_index_in_transaction_per_second": result.inCommit.perSecond,
            "throughput_ratio": result.withIndex.perSecond / max(1, result.withoutIndex.perSecond),
            "throughput_ratio_in_transaction": result.inCommit.perSecond / max(1, result.withoutIndex.perSecond),
            "index_longest_wait_ms": Self.milliseconds(result.withIndex.indexer?.maxLag ?? .zero),
            "index_waits_over_1s": result.withIndex.indexer?.lateOverOneSecond ?? 0,
            "index_bytes_per_message": Double(result.withIndex.bytes - result.withoutIndex.bytes)
                / Double(max(1, result.messages)),
        ]
        var kinds: [String: Any] = [:]
        for (kind, _) in Self.kinds {
            kinds[kind] = [
                "search_p50_ms": Self.percentile(result.search[kind] ?? [], 50),
                "search_p99_ms": Self.percentile(result.search[kind] ?? [], 99),
                "hits_per_page": result.hits[kind] ?? 0,
                "like_p50_ms": Self.percentile(result.like[kind] ?? [], 50),
            ]
        }
        object["kinds"] = kinds
        let all = result.search.values.flatMap { $0 }
        object["search_p99_ms"] = Self.percentile(all, 99)
        object["search_p50_ms"] = Self.percentile(all, 50)
        let data = try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])
        return String(decoding: data, as: UTF8.self)
    }
}
