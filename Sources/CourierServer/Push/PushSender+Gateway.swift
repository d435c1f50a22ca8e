import CourierStore
import Foundation

/// Pushes to phones through their push gateway (Matrix's Push Gateway API), from the same outbox and rules as Web
/// Push.
extension PushSender {
    /// One push to a phone through its push gateway: the `notify` body of Matrix's Push Gateway API, POSTed as JSON.
    func notify(
        _ gateway: PushGateway,
        _ delivery: PushDelivery,
        of job: PushJob,
        nowMs: Int64,
        _ http: OutboundHTTP
    ) async -> Outcome {
        let body = Self.notification(of: job, for: delivery, gateway: gateway)
        let response: OutboundHTTP.Response
        do {
            response = try await http.post(
                gateway.url,
                headers: [("Content-Type", "application/json")],
                body: body
            )
        } catch let refusal as OutboundHTTP.Refusal {
            self.logger.info("a push gateway was refused", metadata: ["reason": "\(refusal)"])
            return .dropped
        } catch {
            return .retry(afterMs: nil)
        }
        return Self.gatewayOutcome(of: response, pushkey: gateway.pushkey, nowMs: nowMs)
    }

    /// The `notify` request's body (Matrix's Push Gateway API, `POST /_matrix/push/v1/notify`): the message's id as the
    /// event's, the conversation as the room (`u:NAME` or `g:NAME`, as the recipient names it), the recipient's unread
    /// count, `prio` high for direct messages and mentions, and the one device. A recipient who hides previews gets
    /// what Matrix's `event_id_only` format sends: no sender, no content.
    static func notification(of job: PushJob, for delivery: PushDelivery, gateway: PushGateway) -> [UInt8] {
        struct Body: Encodable {
            struct Notification: Encodable {
                struct Content: Encodable {
                    var msgtype = "m.text"
                    var body: String
                }
                struct Counts: Encodable {
                    var unread: Int
                }
                struct Device: Encodable {
                    var app_id: String
                    var pushkey: String
                    var pushkey_ts: Int64
                }
                var event_id: String
                var room_id: String
                var type: String?
                var sender: String?
                var sender_display_name: String?
                var content: Content?
                var prio: String
                var counts: Counts
                var devices: [Device]
            }
            var notification: Notification
        }
        let room: String =
            switch delivery.conversation {
            case .user(let name): "u:" + name
            case .group(let name): "g:" + name
            }
        let previews = delivery.previews
        let body = Body(
            notification: .init(
                event_id: job.messageID,
                room_id: room,
                type: previews ? "m.room.message" : nil,
                sender: previews ? job.from : nil,
                sender_display_name: previews ? job.fromDisplayName : nil,
                content: previews ? .init(body: Self.line(job.text)) : nil,
                prio: delivery.urgent ? "high" : "low",
                counts: .init(unread: delivery.unread),
                devices: [
                    .init(
                        app_id: gateway.appID,
                        pushkey: gateway.pushkey,
                        pushkey_ts: delivery.subscription.createdMs / 1000
                    )
                ]
            )
        )
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return Array((try? encoder.encode(body)) ?? Data("{}".utf8))
    }

    /// What a gateway's answer means: 2xx is done, unless its `rejected` lists the pushkey (the platform no longer
    /// knows it: the registration goes); 429 and 5xx are tried again, as a push service's; anything else (a 4xx for
    /// a request it could not take, 404 for a path that is not a gateway's) drops the push, never the registration.
    static func gatewayOutcome(of response: OutboundHTTP.Response, pushkey: String, nowMs: Int64) -> Outcome {
        switch response.status {
        case 200..<300:
            struct Answer: Decodable { var rejected: [String]? }
            let answer = try? JSONDecoder().decode(Answer.self, from: Data(response.body))
            return (answer?.rejected ?? []).contains(pushkey) ? .gone : .sent
        case 404, 410:
            return .dropped
        default:
            return Self.outcome(of: response, nowMs: nowMs)
        }
    }
}
