public import Logging
import Synchronization

/// Collects every log line (message and metadata) a logger writes, for tests that check what is logged.
public final class LogCapture: Sendable {
    private let lines = Mutex<[String]>([])

    public init() {}

    /// A logger at `level` that writes here.
    public func logger(label: String = "courier.test", level: Logger.Level = .trace) -> Logger {
        var logger = Logger(label: label) { label in Handler(capture: self, label: label) }
        logger.logLevel = level
        return logger
    }

    /// Everything logged so far, one line each: level, label, message, metadata.
    public var text: String { self.lines.withLock { $0.joined(separator: "\n") } }

    fileprivate func append(_ line: String) {
        self.lines.withLock { $0.append(line) }
    }

    private struct Handler: LogHandler {
        let capture: LogCapture
        let label: String
        var metadata: Logger.Metadata = [:]
        var logLevel: Logger.Level = .trace

        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { self.metadata[key] }
            set { self.metadata[key] = newValue }
        }

        func log(event: LogEvent) {
            let merged = self.metadata.merging(event.metadata ?? [:]) { $1 }
            let fields = merged.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " ")
            let error = event.error.map { " error=\($0)" } ?? ""
            self.capture.append("\(event.level) \(self.label) \(event.message) \(fields)\(error) [\(event.source)]")
        }
    }
}
