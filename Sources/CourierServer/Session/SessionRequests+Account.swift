import CourierProtocol
import CourierStore

/// What a user does with its own account over its session: its password, its devices, its deletion; and finding
/// another user by name.
extension SessionRequests {
    /// Answers one of the account's requests; with an end when the connection closes after the answer (the user's
    /// own device revoked, the account deleted).
    func ownAccount(
        _ request: SessionStateMachine.Request,
        requestID: UInt64,
        session deviceSession: DeviceSession
    ) async throws -> (ServerEnvelope, SessionStateMachine.WorkEnd?) {
        let store = self.context.store
        let user = deviceSession.user
        var reply = ServerEnvelope()
        reply.requestID = requestID
        switch request {
        case .changePassword(let old, let new, let keepDevices):
            try await self.withOwnPassword(of: user) {
                try await store.changePassword(
                    of: user.id,
                    from: deviceSession.device.id,
                    old: old,
                    new: new,
                    keepDevices: keepDevices,
                    nowMs: self.context.clock.wallMs
                )
            }
            self.logger.info("password changed", metadata: ["user": "\(user.name)", "kept devices": "\(keepDevices)"])
            reply.done = Courier_V1_Done()
        case .devices:
            // The asking device first, then the newest: a list cut to the answer's size keeps those.
            let current = deviceSession.device.id
            let devices = try await store.devices(of: user.name).filter { $0.revokedMs == nil }
                .sorted { ($0.id == current ? 1 : 0, $0.id) > ($1.id == current ? 1 : 0, $1.id) }
            let entries = devices.map { device in
                var entry = Courier_V1_DeviceList.Device()
                entry.id = UInt64(device.id.rawValue)
                entry.name = device.name
                entry.createdMs = device.createdMs
                entry.expiresMs = device.expiresMs
                entry.connectedSinceMs = device.connectedSinceMs ?? 0
                entry.lastSeenMs = device.connectedSinceMs == nil ? device.lastSeenMs ?? 0 : 0
                entry.current = device.id == current
                return entry
            }
            let fitting = Self.fitting(
                sizes: entries.map { (try? $0.serializedBytes() as [UInt8])?.count ?? 0 },
                within: self.context.configuration.limits.maxAnswerBytes
            )
            reply.devices.devices = Array(entries.prefix(fitting))
            reply.devices.more = fitting < entries.count
        case .setBlock(let name, let blocked):
            // A block names a user as a lookup does, and answers whether it exists: it counts as one.
            switch self.context.lookups.admit(user: user.name, address: self.addressKey) {
            case .throttled(let wait):
                throw SessionRefusal(ErrorCodes.rateLimited, "too many users named; retry later", retryAfter: wait)
            case .admitted(let ticket):
                defer { self.context.lookups.finish(ticket, failed: true) }
                try await store.block(name, by: user.id, on: blocked, nowMs: self.context.clock.wallMs)
            }
            reply.done = Courier_V1_Done()
        case .blocks:
            reply.blocks.users = try await store.blocks(of: user.id).map { blocked in
                var entry = Courier_V1_BlockList.Blocked()
                entry.user = blocked.name
                entry.sinceMs = blocked.sinceMs
                return entry
            }
        case .revokeDevice(let device):
            try await store.revokeDevice(device, of: user.name, nowMs: self.context.clock.wallMs)
            self.logger.info("device revoked by its user", metadata: ["user": "\(user.name)", "device": "\(device)"])
            reply.done = Courier_V1_Done()
            if device == deviceSession.device.id {
                return (reply, .close(code: ErrorCodes.tokenRevoked, message: "this device was logged out"))
            }
        case .deleteAccount(let password):
            try await self.withOwnPassword(of: user) {
                try await store.deleteAccount(user.id, password: password, nowMs: self.context.clock.wallMs)
            }
            self.logger.notice("account deleted by its user", metadata: ["user": "\(user.name)"])
            reply.done = Courier_V1_Done()
            return (reply, .close(code: ErrorCodes.tokenRevoked, message: CourierStoreError.accountRemovedMessage))
        case .findUser(let name):
            switch self.context.lookups.admit(user: user.name, address: self.addressKey) {
            case .throttled(let wait):
                throw SessionRefusal(ErrorCodes.rateLimited, "too many users looked up; retry later", retryAfter: wait)
            case .admitted(let ticket):
                // Every lookup counts, found or not.
                defer { self.context.lookups.finish(ticket, failed: true) }
                guard let found = try await store.profile(of: name, seenBy: user.id) else {
                    throw CourierStoreError(.unknownUser, "no user named \(Self.printable(name))")
                }
                reply.user.name = found.user
                reply.user.profile = Courier_V1_Profile(found)
            }
        case .setProfile(let update):
            // The push setting alone is no profile change: nobody else sees it.
            guard update.changesProfile else {
                if let previews = update.pushPreviews { try await store.setPushPreviews(previews, for: user.id) }
                reply.done = Courier_V1_Done()
                break
            }
            switch self.context.profileChanges.admit(user: user.name, address: self.addressKey) {
            case .throttled(let wait):
                throw SessionRefusal(ErrorCodes.rateLimited, "too many profile changes; retry later", retryAfter: wait)
            case .admitted(let ticket):
                // Every change counts, refused or not: each may reach every user who sees this one.
                defer { self.context.profileChanges.finish(ticket, failed: true) }
                if case .set(let avatar, let thumbnail)? = update.avatar {
                    for picture in [avatar, thumbnail] { try await self.checkImage(picture, of: user.id) }
                }
                let appended = try await store.setProfile(of: user.id, update, nowMs: self.context.clock.wallMs)
                self.context.fanout.logsGrew(appended)
                // With a profile change, the push setting only once that is made (a refused change changes nothing).
                if let previews = update.pushPreviews { try await store.setPushPreviews(previews, for: user.id) }
                reply.done = Courier_V1_Done()
            }
        case .profiles(let names):
            var profiles = try await store.profiles(of: names, for: user.id).map(Courier_V1_Profile.init)
            // One's own profile says one's push setting, which nobody else sees.
            if let own = profiles.firstIndex(where: { $0.user.lowercased() == user.name.lowercased() }) {
                profiles[own].pushPreviews = try await store.pushPreviews(of: user.id)
            }
            reply.profiles.profiles = profiles
        default:
            throw SessionRefusal(ErrorCodes.invalidRequest, "not a request about the account")
        }
        return (reply, nil)
    }

    /// Refuses a picture the user has not uploaded, or whose bytes are not an image of the type it says.
    private func checkImage(_ picture: ProfileImage, of user: UserID) async throws {
        guard picture.size > 0, SHA256Hex.isValid(picture.sha256) else { return }
        // Its upload first: another user's file is not looked into.
        guard try await self.context.store.uploadedSize(by: user, sha256: picture.sha256) == picture.size else {
            throw CourierStoreError(.unknownMedia, "upload the picture \(picture.sha256) before showing it")
        }
        var head: [UInt8] = []
        do {
            try await self.context.media.read(picture.sha256, range: 0..<min(16, picture.size)) { bytes in
                head += bytes.readableBytesView
            }
        } catch {
            throw CourierStoreError(.unknownMedia, "upload the picture \(picture.sha256) before showing it")
        }
        guard picture.matches(head: head) else {
            throw CourierStoreError(.invalidProfile, "the picture \(picture.sha256) is not a \(picture.mime) image")
        }
    }

    /// Runs work that checks the user's present password under the login limits of its name and this address: a
    /// wrong password counts as a failed login, and so does a success (it hashed twice: a user changing its password
    /// in a loop would keep the password threads busy); past the limits they are refused with `rate-limited` before
    /// any check (the connection stays: it is the user's own, logged in).
    private func withOwnPassword(of user: User, _ body: () async throws -> Void) async throws {
        let outcome: Limited<Void> = await self.limited(
            .login(user: user.name),
            counts: { (result: Result<Void, CourierStoreError>) in
                if case .failure(let error) = result { error.code == .wrongPassword } else { true }
            },
            {
                do {
                    try await body()
                    return .success(())
                } catch let error as CourierStoreError {
                    return .failure(error)
                } catch {
                    return .failure(CourierStoreError.plain(error, doing: "check the password"))
                }
            }
        )
        switch outcome {
        case .throttled(let wait):
            throw SessionRefusal(
                ErrorCodes.rateLimited,
                "too many password checks for this user or address; retry later",
                retryAfter: wait
            )
        case .unchecked:
            throw CourierStoreError(.storageFailed, "the password could not be checked; try again later")
        case .checked(.failure(let error)) where error.code == .throttled:
            // The password threads' queue is full.
            throw SessionRefusal(ErrorCodes.rateLimited, error.message, retryAfter: .seconds(1))
        case .checked(let result):
            try result.get()
        }
    }
}
