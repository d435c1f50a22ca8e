// swift-tools-version: 6.1
//
// libFuzzer targets for CourierWire's decoders (the WebSocket codec behind NIO's frame decoder too) and CourierProtocol's envelope parsing. A package of its own, built with its own scratch path by
// `scripts/fuzz`, because `-sanitize=fuzzer` instruments everything it builds and clashes with ordinary executables.

import PackageDescription

let package = Package(
    name: "CourierFuzz",
    dependencies: [
        .package(name: "courier", path: ".."),
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.2"),
    ],
    targets: [
        .target(name: "FuzzSupport", dependencies: [.product(name: "CourierWire", package: "courier")]),
        .executableTarget(
            name: "FuzzCompat",
            dependencies: ["FuzzSupport", .product(name: "CourierWire", package: "courier")]
        ),
        .executableTarget(
            name: "FuzzNative",
            dependencies: ["FuzzSupport", .product(name: "CourierWire", package: "courier")]
        ),
        .executableTarget(
            name: "FuzzWebsocket",
            dependencies: [
                "FuzzSupport",
                .product(name: "CourierWire", package: "courier"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "NIOWebSocket", package: "swift-nio"),
            ]
        ),
        .executableTarget(
            name: "FuzzEnvelope",
            dependencies: [
                .product(name: "CourierWire", package: "courier"),
                .product(name: "CourierProtocol", package: "courier"),
            ]
        ),
    ],
    swiftLanguageModes: [.v6]
)
