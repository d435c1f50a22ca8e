// swift-tools-version: 6.1
//
// Courier's benchmarks: a package of its own so the main package never depends on the benchmark harness.
// Run from this folder: swift package --disable-sandbox benchmark   (docs/BENCHMARKS.md has the exact commands)

import PackageDescription

let package = Package(
    name: "CourierBenchmarks",
    platforms: [.macOS(.v15)],
    dependencies: [
        .package(name: "courier", path: ".."),
        .package(
            url: "https://github.com/ordo-one/package-benchmark.git",
            from: "1.38.1",
            // The benchmark library does not build without its malloc interposer; naming the trait also leaves out the
            // Swift runtime interposer, which this machine's package copies lack. The interposer adds a cost to every
            // allocation: docs/BENCHMARKS.md cross-checks with WireProfile, which runs the same code without it.
            traits: ["MallocInterposer"]
        ),
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-nio-extras.git", from: "1.35.2"),
    ],
    targets: [
        // The decode scenarios, shared by the benchmarks and the profiling harness.
        .target(
            name: "WireScenarios",
            dependencies: [
                .product(name: "CourierWire", package: "courier"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "NIOExtras", package: "swift-nio-extras"),
            ]
        ),
        // Runs one scenario with no harness, for perf or valgrind --tool=callgrind.
        .executableTarget(name: "WireProfile", dependencies: ["WireScenarios"]),
        .executableTarget(
            name: "WireBenchmarks",
            dependencies: [
                .product(name: "Benchmark", package: "package-benchmark"),
                "WireScenarios",
            ],
            path: "Benchmarks/WireBenchmarks",
            plugins: [.plugin(name: "BenchmarkPlugin", package: "package-benchmark")]
        ),
    ],
    swiftLanguageModes: [.v5]
)
