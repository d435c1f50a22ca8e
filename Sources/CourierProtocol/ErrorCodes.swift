/// The codes a server puts in `Error.code` (native) or `"code"` (compat), each with what it means.
///
/// docs/PROTOCOL.md lists the same table; a test keeps the two equal.
public enum ErrorCodes {
    // Authentication
    public static let notAuthenticated = "not-authenticated"
    public static let authFailed = "auth-failed"
    public static let tokenExpired = "token-expired"
    public static let tokenRevoked = "token-revoked"
    public static let throttled = "throttled"
    public static let alreadyAuthenticated = "already-authenticated"
    public static let authTimeout = "auth-timeout"
    // Signing up and one's own account
    public static let registrationClosed = "registration-closed"
    public static let inviteInvalid = "invite-invalid"
    public static let inviteExpired = "invite-expired"
    public static let inviteUsedUp = "invite-used-up"
    public static let weakPassword = "weak-password"
    public static let wrongPassword = "wrong-password"
    public static let rateLimited = "rate-limited"
    public static let invalidProfile = "invalid-profile"
    // Requests
    public static let envelopeInvalid = "envelope-invalid"
    public static let unsupported = "unsupported"
    public static let invalidRequest = "invalid-request"
    public static let invalidName = "invalid-name"
    public static let nameTaken = "name-taken"
    public static let textTooLarge = "text-too-large"
    public static let emptyMessage = "empty-message"
    public static let idTooLong = "id-too-long"
    public static let unknownUser = "unknown-user"
    public static let unknownGroup = "unknown-group"
    public static let notMember = "not-member"
    public static let notOwner = "not-owner"
    public static let notAdmin = "not-admin"
    public static let notContact = "not-contact"
    public static let unknownMessage = "unknown-message"
    public static let recallWindowPassed = "recall-window-passed"
    public static let ambiguousMessage = "ambiguous-message"
    public static let notSender = "not-sender"
    public static let messageRecalled = "message-recalled"
    public static let editWindowPassed = "edit-window-passed"
    public static let tooManyEdits = "too-many-edits"
    public static let invalidReaction = "invalid-reaction"
    public static let tooManyReactions = "too-many-reactions"
    public static let storageFailed = "storage-failed"
    // Media
    public static let mediaTooLarge = "media-too-large"
    public static let quotaExceeded = "quota-exceeded"
    public static let mediaMismatch = "media-mismatch"
    public static let unknownMedia = "unknown-media"
    public static let unknownUpload = "unknown-upload"
    public static let uploadBusy = "upload-busy"
    // The connection
    public static let idleTimeout = "idle-timeout"
    public static let slowConsumer = "slow-consumer"
    public static let serverFull = "server-full"
    public static let shuttingDown = "shutting-down"
    public static let framingError = "framing-error"
    public static let packetSkipped = "packet-skipped"
    public static let internalError = "internal"

    /// Every code with its meaning, in the order docs/PROTOCOL.md lists them. `closes` tells whether the server
    /// closes the connection after sending it.
    public static let all: [(code: String, closes: Bool, meaning: String)] = [
        (notAuthenticated, true, "the first request was not a `hello` / `auth`"),
        (authFailed, true, "wrong user name or password, or an unknown token"),
        (tokenExpired, true, "the token is past its expiry: log in with the password again"),
        (
            tokenRevoked, true,
            "the token was revoked (`courier user revoke`, a password change, a removed user, a logout, a revoke from another device)"
        ),
        (throttled, true, "too many failed logins for this user name or address; `retry_after_ms` says when to retry"),
        (alreadyAuthenticated, false, "a second `hello` on an authenticated connection"),
        (authTimeout, true, "no `hello` within the authentication timeout"),
        (
            registrationClosed, true,
            "a sign-up where the server's registration is closed (accounts by its administrator)"
        ),
        (
            inviteInvalid, true,
            "a sign-up without an invitation where the server takes new users by invitation, or with one that does not exist or was revoked"
        ),
        (inviteExpired, true, "a sign-up with an invitation past its expiry"),
        (inviteUsedUp, true, "a sign-up with an invitation used as many times as it allows"),
        (
            weakPassword, false,
            "a password chosen shorter than 8 characters or longer than 1,024 bytes (a sign-up's `hello` is closed)"
        ),
        (wrongPassword, false, "the present password, asked for to change it or to delete the account, was wrong"),
        (
            invalidProfile, false,
            "a display name or a profile picture that breaks the rules (docs/PROTOCOL.md, \"Profiles\")"
        ),
        (
            rateLimited, false,
            "too many requests of this kind (finding users, profile changes; password checks of the user's own: changing the password, deleting the account); `retry_after_ms` says when to retry"
        ),
        (envelopeInvalid, true, "a frame's payload is not a valid envelope"),
        (unsupported, false, "a request this server does not know (a newer client)"),
        (
            invalidRequest, false,
            "a request missing a required field, or with one out of range (a `hello` with a bad device name is closed)"
        ),
        (invalidName, false, "a user or group name that breaks the naming rule (a sign-up's `hello` is closed)"),
        (
            nameTaken, false,
            "a group of that name exists, or a user of that name exists or existed (a sign-up's `hello` is closed)"
        ),
        (textTooLarge, false, "a text longer than the server's `max_text_bytes`"),
        (emptyMessage, false, "a message with no text"),
        (idTooLong, false, "a message id longer than 128 bytes"),
        (unknownUser, false, "no such user, or the user was removed"),
        (unknownGroup, false, "no such group"),
        (notMember, false, "the sender is not a member of the conversation"),
        (
            notOwner, false,
            "only the group's owner may do that: change roles, hand the group on, remove an admin"
        ),
        (notAdmin, false, "only the group's owner and admins may add or remove others"),
        (notContact, false, "only contacts (both have written in their direct conversation) can be added to a group"),
        (
            unknownMessage, false,
            "no such message that this user can see (sent to a conversation it is in, after it joined); for a recall, one it did not send there"
        ),
        (recallWindowPassed, false, "a recall after the recall window"),
        (
            ambiguousMessage, false,
            "a message named by an id several messages this user can see carry (ids are unique per sender only): name its sender or conversation too"
        ),
        (notSender, false, "an edit of a message someone else sent"),
        (messageRecalled, false, "an edit of, a reply to or a reaction on a recalled message"),
        (editWindowPassed, false, "an edit after the edit window"),
        (tooManyEdits, false, "a message edited `max-edits-per-message` times already"),
        (invalidReaction, false, "a reaction that is neither one emoji nor one word of at most 32 bytes"),
        (
            tooManyReactions, false,
            "a message with `max-reaction-keys` different reactions already, or a user with `max-reactions-per-user` on it"
        ),
        (
            storageFailed, false,
            "the server could not reach or write its database (disk full, I/O error, PostgreSQL down or out of reach): not stored, unless PostgreSQL stopped answering during the `COMMIT` itself, so send again with the same `id` (one stored is answered as a duplicate); try again after `retry_after_ms` (a failed write or login closes the connection)"
        ),
        (mediaTooLarge, false, "a media file over the server's `max_media_bytes`: nothing is taken"),
        (
            quotaExceeded, false,
            "the upload would put the user's stored media over its quota: nothing is stored; a group past `max-groups-per-maker`"
        ),
        (
            mediaMismatch, false,
            "an upload's bytes do not match its declared size or sha256 (or overrun the stream's window): nothing is stored"
        ),
        (
            unknownMedia, false,
            "no media with that sha256 that this user may see, or a send of media this user has not uploaded"
        ),
        (unknownUpload, false, "no upload in progress for that stream"),
        (
            uploadBusy, false,
            "another connection is sending this upload (it may be one that broke and is not closed yet): retry after `retry_after_ms`"
        ),
        (idleTimeout, true, "nothing received for the idle timeout (send pings)"),
        (slowConsumer, true, "the client stopped reading; it resyncs from its acknowledged cursor on reconnect"),
        (
            serverFull, true,
            "the server is at its connection limit, or this address has too many connections not logged in"
        ),
        (shuttingDown, true, "the server is stopping; reconnect later"),
        (packetSkipped, false, "a corrupt compat packet was skipped up to its end marker (with the end marker on)"),
        (framingError, true, "bytes that break the framing (the native port follows it with a `goaway`)"),
        (internalError, true, "a bug in the server; the connection is closed, nothing acknowledged is lost"),
    ]
}
