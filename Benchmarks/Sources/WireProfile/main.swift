import Foundation
import WireScenarios

// Runs one decode scenario a number of times, with no harness around it, for a profiler:
//   WireProfile "native 64 B" 20
//   valgrind --tool=callgrind .build/release/WireProfile "native 64 B" 2

/// The scenario named `name`, building only what the lookup needs (each decode scenario encodes 16 MiB up front).
func scenario(named name: String) -> Scenario? {
    if let parser = headerParserScenarios().first(where: { $0.name == name }) { return parser }
    return payloadSizes.lazy.flatMap { scenarios(size: $0) }.first { $0.name == name }
}

let arguments = CommandLine.arguments.dropFirst()
guard let name = arguments.first else {
    print("usage: WireProfile SCENARIO [ITERATIONS]; scenarios:")
    for scenario in headerParserScenarios() + payloadSizes.flatMap({ scenarios(size: $0) }) {
        print("  \(scenario.name)")
    }
    exit(2)
}
let iterations = arguments.dropFirst().first.flatMap { Int($0) } ?? 10
guard let scenario = scenario(named: name) else {
    print("no scenario named \(name)")
    exit(2)
}
let start = ContinuousClock.now
for _ in 0..<iterations { try scenario.run() }
let elapsed = ContinuousClock.now - start
let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
let perIteration = seconds / Double(iterations)
print(
    "\(name): \(iterations) iterations, \(Int(perIteration * 1e6)) µs each, \(Int(Double(scenario.frames) / perIteration)) frames/s"
)
