/// One push as the push service takes it (RFC 8030 §5): a `POST` to the subscription's endpoint with the sealed
/// payload and the headers that say how long to keep it, how urgent it is, which push it replaces, and who sends it.
/// The sender (with its HTTP client) only sends what this holds.
public struct WebPushRequest: Sendable {
    /// How soon a push should wake the device (RFC 8030 §5.3).
    public enum Urgency: String, Sendable {
        case veryLow = "very-low"
        case low
        case normal
        case high
    }

    /// The longest a push service is asked to keep a push for a device that is away: four weeks, the most push
    /// services keep.
    public static let longestTTLSeconds = 28 * 86_400

    /// The subscription's endpoint, where the push is `POST`ed.
    public var endpoint: String
    /// The headers, by name, in the order they are sent.
    public var headers: [(name: String, value: String)]
    /// The sealed payload (``WebPushEncryption``).
    public var body: [UInt8]

    /// A push of `payload` to one subscription.
    ///
    /// - Parameters:
    ///   - payload: What the service worker reads (at most ``WebPushEncryption/maxPayload`` bytes).
    ///   - endpoint: The subscription's endpoint.
    ///   - keys: The subscription's keys.
    ///   - key: The server's VAPID key, which signs the request.
    ///   - subject: The server operator's contact, for the push service (`mailto:` or `https:`).
    ///   - urgency: `high` for a direct message or a mention, `normal` otherwise.
    ///   - topic: A push with the same topic replaces one still waiting (``VAPIDKey/topic(for:)``); at most 32
    ///     base64url characters, or nil.
    ///   - ttlSeconds: How long the push service keeps the push for a device that is away (0: only if it is there);
    ///     cut to ``longestTTLSeconds``.
    ///   - nowSeconds: The time, in seconds since 1970, for the VAPID token's expiry.
    ///   - paddedTo: The payload's length is hidden up to this many bytes.
    /// - Throws: ``PushError`` (`payload-too-large`, `bad-endpoint`).
    public init(
        payload: some Collection<UInt8>,
        endpoint: String,
        keys: PushSubscriptionKeys,
        key: VAPIDKey,
        subject: String,
        urgency: Urgency,
        topic: String?,
        ttlSeconds: Int,
        nowSeconds: Int64,
        paddedTo: Int = 0
    ) throws {
        try self.init(
            payload: payload,
            endpoint: endpoint,
            keys: keys,
            authorization: try key.authorization(for: endpoint, subject: subject, nowSeconds: nowSeconds),
            urgency: urgency,
            topic: topic,
            ttlSeconds: ttlSeconds,
            paddedTo: paddedTo
        )
    }

    /// A push with an `Authorization` made before (``VAPIDKey/authorization(for:subject:nowSeconds:lifetimeSeconds:)``
    /// for the endpoint's origin, still good): a sender signs one token per push service for hours, not one per push.
    public init(
        payload: some Collection<UInt8>,
        endpoint: String,
        keys: PushSubscriptionKeys,
        authorization: String,
        urgency: Urgency,
        topic: String?,
        ttlSeconds: Int,
        paddedTo: Int = 0
    ) throws {
        if let topic {
            precondition(
                topic.utf8.count <= 32 && Base64URL.decode(topic) != nil,
                "a topic is at most 32 base64url characters"
            )
        }
        let body = try WebPushEncryption.encrypt(payload, for: keys, paddedTo: paddedTo)
        var headers: [(name: String, value: String)] = [
            ("Content-Type", "application/octet-stream"),
            ("Content-Encoding", "aes128gcm"),
            ("Content-Length", String(body.count)),
            ("TTL", String(min(max(0, ttlSeconds), Self.longestTTLSeconds))),
            ("Urgency", urgency.rawValue),
        ]
        if let topic { headers.append(("Topic", topic)) }
        headers.append(("Authorization", authorization))
        self.endpoint = endpoint
        self.headers = headers
        self.body = body
    }

    /// The value of a header, by name (without regard to case), or nil.
    public func header(_ name: String) -> String? {
        self.headers.first { $0.name.lowercased() == name.lowercased() }?.value
    }
}
