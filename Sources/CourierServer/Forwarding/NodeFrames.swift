import CourierProtocol
import CourierStore
import CourierVocabulary
import Crypto
import Foundation
import NIOCore
import NIOExtras
import SwiftProtobuf

/// A write as it goes to the node that owns its conversation, and back from the frame (docs/LOG-DESIGN.md, "Step 4").
extension Courier_V1_NodeWrite {
    init(_ request: WriteRequest, id: UInt64, origin: Int) {
        self.init()
        self.id = id
        self.origin = UInt64(clamping: origin)
        switch request {
        case .send(let send):
            self.user = send.sender.rawValue
            self.device = send.device?.rawValue ?? 0
            self.send = .with { node in
                node.id = send.id
                node.to = .init(send.to)
                node.body = Data(send.body)
                if let media = send.media {
                    node.media = .with {
                        $0.sha256 = media.sha256
                        $0.size = media.size
                        $0.mime = media.mime
                        $0.name = media.name
                    }
                }
                switch send.replyTo {
                case .seq(let seq): node.replySeq = seq
                case .id(let id, let from):
                    node.replyID = .with {
                        $0.id = id
                        if let from { $0.from = from }
                    }
                case nil: break
                }
                if let tokens = send.searchTokens { node.tokens = .with { $0.tokens = tokens } }
                if let mentions = send.mentions {
                    node.mentions = .with {
                        $0.names = mentions.names
                        $0.runs = mentions.runs
                        $0.everyone = mentions.everyone
                    }
                }
            }
        case .markRead(let user, let conversation, let upTo):
            self.user = user.rawValue
            self.markRead = .with {
                $0.conversation = .init(conversation)
                $0.upToSeq = upTo
            }
        case .recall(let user, let conversation, let id):
            self.user = user.rawValue
            self.recall = .with {
                $0.conversation = .init(conversation)
                $0.id = id
            }
        case .edit(let edit):
            self.user = edit.user.rawValue
            self.device = edit.device?.rawValue ?? 0
            self.edit = .with { node in
                node.conversation = .init(edit.conversation)
                node.seq = edit.seq
                node.body = Data(edit.body)
                if let tokens = edit.searchTokens { node.tokens = .with { $0.tokens = tokens } }
            }
        case .react(let react):
            self.user = react.user.rawValue
            self.react = .with {
                $0.conversation = .init(react.conversation)
                $0.seq = react.seq
                $0.key = react.key
                $0.on = react.on
            }
        case .ack:
            // Never forwarded (``WriteRoutes/key(of:userName:)``).
            break
        }
    }

    /// The write this frame carries; nil for one that carries none (an acknowledgement, or a request this
    /// version does not know).
    var writeRequest: WriteRequest? {
        let user = UserID(rawValue: self.user)
        let device = self.device == 0 ? nil : DeviceID(rawValue: self.device)
        switch self.request {
        case .send(let node):
            var send = WriteRequest.Send(
                sender: user,
                device: device,
                id: node.id,
                to: node.to.conversation,
                body: Array(node.body),
                media: node.hasMedia
                    ? MediaReference(
                        sha256: node.media.sha256,
                        size: node.media.size,
                        mime: node.media.mime,
                        name: node.media.name
                    ) : nil
            )
            switch node.reply {
            case .replySeq(let seq): send.replyTo = .seq(seq)
            case .replyID(let id): send.replyTo = .id(id.id, from: id.hasFrom ? id.from : nil)
            case nil: break
            }
            if node.hasTokens { send.searchTokens = node.tokens.tokens }
            if node.hasMentions {
                send.mentions = Mentions(
                    names: node.mentions.names,
                    runs: node.mentions.runs,
                    everyone: node.mentions.everyone
                )
            }
            return .send(send)
        case .markRead(let node):
            return .markRead(user: user, conversation: node.conversation.conversation, upToSeq: node.upToSeq)
        case .recall(let node):
            return .recall(user: user, conversation: node.conversation.conversation, id: node.id)
        case .edit(let node):
            var edit = WriteRequest.Edit(
                user: user,
                device: device,
                conversation: node.conversation.conversation,
                seq: node.seq,
                body: Array(node.body)
            )
            if node.hasTokens { edit.searchTokens = node.tokens.tokens }
            return .edit(edit)
        case .react(let node):
            return .react(
                .init(
                    user: user,
                    conversation: node.conversation.conversation,
                    seq: node.seq,
                    key: node.key,
                    on: node.on
                )
            )
        case nil:
            return nil
        }
    }
}

extension Courier_V1_NodeAddress {
    init(_ conversation: Conversation) {
        self.init()
        switch conversation {
        case .user(let name): self.name = name
        case .group(let name):
            self.group = true
            self.name = name
        }
    }

    var conversation: Conversation { self.group ? .group(self.name) : .user(self.name) }
}

extension Courier_V1_NodeOutcome {
    /// What became of a write, for the node it came from: a refusal and a failure carry the store's code and
    /// message; any other error is a failure with nothing committed (`storage-failed`).
    init(id: UInt64, _ result: Result<WriteOutcome, any Error>) {
        self.init()
        self.id = id
        switch result {
        case .success(.sent(let receipt)):
            self.sent = .with {
                $0.id = receipt.id
                $0.conversation = .init(receipt.conversation)
                $0.seq = receipt.seq
                $0.timeMs = receipt.timeMs
                $0.duplicate = receipt.duplicate
                $0.recipients = Int64(receipt.recipients)
            }
        case .success(.done):
            self.done = true
        case .success(.refused(let error)):
            self.refused = .init(error)
        case .failure(let error):
            self.failed = .init(
                error as? CourierStoreError ?? CourierStoreError(.storageFailed, "the owner's commit failed")
            )
        }
    }

    /// The outcome as the node that took the write reports it; a frame it cannot read is a failure.
    var outcome: Result<WriteOutcome, any Error> {
        switch self.result {
        case .sent(let sent):
            return .success(
                .sent(
                    SendReceipt(
                        id: sent.id,
                        conversation: sent.conversation.conversation,
                        seq: sent.seq,
                        timeMs: sent.timeMs,
                        duplicate: sent.duplicate,
                        recipients: Int(clamping: sent.recipients)
                    )
                )
            )
        case .done:
            return .success(.done)
        case .refused(let error):
            return .success(.refused(error.storeError))
        case .failed(let error):
            return .failure(error.storeError)
        case nil:
            return .failure(CourierStoreError(.storageFailed, "the owner's answer was not understood"))
        }
    }
}

extension Courier_V1_NodeError {
    init(_ error: CourierStoreError) {
        self.init()
        self.code = error.code.description
        self.message = error.message
    }

    var storeError: CourierStoreError {
        CourierStoreError(CourierStoreError.Code(named: self.code) ?? .storageFailed, self.message)
    }
}

/// The proofs two nodes exchange on a forward link: HMAC-SHA256 under the listening node's secret of the other
/// side's nonce and the prover's name. Neither side sends the secret, and a nonce is never answered twice.
enum NodeProof {
    static let nonceBytes = 32

    static func nonce() -> [UInt8] {
        var generator = SystemRandomNumberGenerator()
        return (0..<Self.nonceBytes).map { _ in generator.next() }
    }

    static func proof(secret: String, nonce: some DataProtocol, name: String) -> Data {
        Data(
            HMAC<SHA256>.authenticationCode(
                for: Self.message(nonce, name),
                using: SymmetricKey(data: Data(secret.utf8))
            )
        )
    }

    /// Compared in constant time.
    static func verify(_ proof: Data, secret: String, nonce: some DataProtocol, name: String) -> Bool {
        HMAC<SHA256>.isValidAuthenticationCode(
            proof,
            authenticating: Self.message(nonce, name),
            using: SymmetricKey(data: Data(secret.utf8))
        )
    }

    private static func message(_ nonce: some DataProtocol, _ name: String) -> Data {
        var message = Data(nonce)
        message.append(0)
        message.append(contentsOf: name.utf8)
        return message
    }
}

/// A frame's bytes, and back: one protobuf message per length-prefixed frame (the length's framing is
/// swift-nio-extras' `LengthFieldBasedFrameDecoder` and `LengthFieldPrepender`).
extension Courier_V1_NodeFrame {
    init(frame: ByteBuffer) throws {
        try self.init(serializedBytes: Array(frame.readableBytesView))
    }

    func buffer(_ allocator: ByteBufferAllocator) -> ByteBuffer {
        // Serializing a message built here cannot fail (no required fields, no Any).
        let bytes: [UInt8] = (try? self.serializedBytes()) ?? []
        return allocator.buffer(bytes: bytes)
    }
}

extension ChannelPipeline.SynchronousOperations {
    /// A forward link's framing, both ways: a 4-byte big-endian length before each frame, and no more than
    /// `maxFrameBytes` after it (a longer frame is an error, which closes the link).
    func addNodeFraming(maxFrameBytes: Int) throws {
        try self.addHandler(
            ByteToMessageHandler(
                LengthFieldBasedFrameDecoder(lengthFieldBitLength: .fourBytes),
                maximumBufferSize: maxFrameBytes + 4
            )
        )
        try self.addHandler(LengthFieldPrepender(lengthFieldBitLength: .fourBytes))
    }
}
