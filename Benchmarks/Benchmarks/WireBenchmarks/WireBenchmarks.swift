import Benchmark
import WireScenarios

// Decode throughput of Courier's framings against their closest SwiftNIO Extras analogues, in the same run:
// native vs LengthFieldBasedFrameDecoder, compat vs NIOJSONRPCFraming.ContentLengthHeaderFrameDecoder, and a plain
// copy of the same bytes as the ceiling. One iteration decodes 16 MiB of payload (`streamBytes`) fed in 64 KiB reads;
// frames/s and bytes/s follow from its wall clock. docs/BENCHMARKS.md has the command and the figures.

let benchmarks: @Sendable () -> Void = {
    Benchmark.defaultConfiguration = .init(
        metrics: [.wallClock, .throughput, .mallocCountTotal],
        timeUnits: .microseconds,
        warmupIterations: 2,
        maxDuration: .seconds(3),
        maxIterations: 200
    )
    for size in payloadSizes {
        for scenario in scenarios(size: size) {
            Benchmark(scenario.name) { benchmark in
                for _ in benchmark.scaledIterations {
                    try scenario.run()
                }
            }
        }
    }
}
