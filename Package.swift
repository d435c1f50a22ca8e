// swift-tools-version: 6.1
//
// Courier: an instant-messaging and media-delivery system for Linux servers and Swift clients.
//
// Modules that have no code yet (CourierProtocol, CourierStore, CourierServer, CourierClient, MediaCache) join this
// manifest with the issues that bring them; see README.md for the plan.

import PackageDescription

let strictSettings: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("InternalImportsByDefault"),
]

let package = Package(
    name: "courier",
    platforms: [.macOS(.v15)],
    products: [
        .library(name: "CourierWire", targets: ["CourierWire"]),
        .library(name: "CourierTesting", targets: ["CourierTesting"]),
        .executable(name: "courier", targets: ["courier"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
    ],
    targets: [
        // Bytes <-> frames: the compat (JSON header + CRLF) framing and the native binary framing.
        .target(
            name: "CourierWire",
            dependencies: [.product(name: "NIOCore", package: "swift-nio")],
            swiftSettings: strictSettings
        ),
        // Helpers shared by the tests (and, later, by downstream users' tests).
        .target(
            name: "CourierTesting",
            dependencies: [
                "CourierWire",
                .product(name: "NIOCore", package: "swift-nio"),
            ],
            swiftSettings: strictSettings
        ),
        // The one command-line tool.
        .executableTarget(
            name: "courier",
            dependencies: [
                "CourierWire",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "CourierWireTests",
            dependencies: [
                "CourierWire",
                "CourierTesting",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOTestUtils", package: "swift-nio"),
            ],
            swiftSettings: strictSettings
        ),
    ],
    swiftLanguageModes: [.v6]
)
