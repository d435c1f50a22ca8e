internal import CourierStore
internal import Foundation
internal import GRDB

/// The database schema, built only through migrations so that every data folder reaches the same shape.
enum Schema {
    /// Numbers every message stored before the search index, in the order they were sent, for
    /// ``CourierDatabase/indexPending(limit:)`` to index.
    static let numberMessagesForSearch = """
        INSERT INTO message_search (conversation_id, seq, tokens)
            SELECT conversation_id, seq, NULL FROM messages WHERE recalled = 0
            ORDER BY time_ms, conversation_id, seq
        """

    static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1") { db in
            // Accounts. A removed user keeps its row (and so its name) so that old messages still name their sender.
            try db.execute(
                sql: """
                    CREATE TABLE users (
                        id INTEGER PRIMARY KEY,
                        name TEXT NOT NULL UNIQUE COLLATE NOCASE,
                        password_hash TEXT,
                        created_ms INTEGER NOT NULL,
                        removed_ms INTEGER,
                        -- The newest cursor in this user's event log.
                        log_cursor INTEGER NOT NULL DEFAULT 0
                    );
                    -- One row per logged-in device; the token is stored only as its SHA-256.
                    CREATE TABLE devices (
                        id INTEGER PRIMARY KEY,
                        user_id INTEGER NOT NULL REFERENCES users(id),
                        name TEXT NOT NULL,
                        token_hash BLOB NOT NULL UNIQUE,
                        created_ms INTEGER NOT NULL,
                        expires_ms INTEGER NOT NULL,
                        revoked_ms INTEGER,
                        last_seen_ms INTEGER,
                        -- Every event at or below this cursor is durably stored by the device.
                        acked_cursor INTEGER NOT NULL DEFAULT 0
                    );
                    CREATE INDEX devices_by_user ON devices(user_id);
                    -- kind 1: direct (user_a < user_b, or equal for notes to oneself); kind 2: group (name, owner).
                    CREATE TABLE conversations (
                        id INTEGER PRIMARY KEY,
                        kind INTEGER NOT NULL,
                        name TEXT UNIQUE COLLATE NOCASE,
                        owner_id INTEGER REFERENCES users(id),
                        user_a INTEGER REFERENCES users(id),
                        user_b INTEGER REFERENCES users(id),
                        last_seq INTEGER NOT NULL DEFAULT 0,
                        last_ms INTEGER NOT NULL DEFAULT 0,
                        created_ms INTEGER NOT NULL,
                        UNIQUE (user_a, user_b)
                    );
                    -- Current members only; joined_seq is the conversation's last_seq when the member joined.
                    CREATE TABLE members (
                        conversation_id INTEGER NOT NULL REFERENCES conversations(id),
                        user_id INTEGER NOT NULL REFERENCES users(id),
                        joined_seq INTEGER NOT NULL,
                        read_seq INTEGER NOT NULL DEFAULT 0,
                        delivered_seq INTEGER NOT NULL DEFAULT 0,
                        PRIMARY KEY (conversation_id, user_id)
                    ) WITHOUT ROWID;
                    CREATE INDEX members_by_user ON members(user_id, conversation_id);
                    CREATE TABLE messages (
                        conversation_id INTEGER NOT NULL REFERENCES conversations(id),
                        seq INTEGER NOT NULL,
                        sender_id INTEGER NOT NULL REFERENCES users(id),
                        -- The device that sent it (not a foreign key: devices may be deleted some day).
                        sender_device_id INTEGER,
                        client_id TEXT NOT NULL,
                        time_ms INTEGER NOT NULL,
                        body BLOB NOT NULL,
                        recalled INTEGER NOT NULL DEFAULT 0,
                        PRIMARY KEY (conversation_id, seq)
                    ) WITHOUT ROWID;
                    -- A resend of a message id returns the original: ids are unique per sender.
                    CREATE UNIQUE INDEX messages_by_client_id ON messages(sender_id, client_id);
                    -- Each user's event log. kind 1 message (conversation, seq); 2 recall (conversation, seq, actor);
                    -- 3 receipt (conversation, seq = up to, actor = reader, detail = 1 delivered / 2 read);
                    -- 4 membership (conversation, seq = at, actor = member, detail = 1 joined / 2 left).
                    CREATE TABLE events (
                        user_id INTEGER NOT NULL,
                        cursor INTEGER NOT NULL,
                        kind INTEGER NOT NULL,
                        conversation_id INTEGER NOT NULL,
                        seq INTEGER NOT NULL,
                        actor_id INTEGER,
                        detail INTEGER,
                        PRIMARY KEY (user_id, cursor)
                    ) WITHOUT ROWID;
                    -- Changes made by another process (the admin commands) that a running server must notice.
                    -- kind 1: a user's event log grew; 2: a device was revoked; 3: a user was removed.
                    CREATE TABLE changes (
                        id INTEGER PRIMARY KEY,
                        kind INTEGER NOT NULL,
                        user_id INTEGER,
                        device_id INTEGER,
                        time_ms INTEGER NOT NULL
                    );
                    """
            )
        }
        migrator.registerMigration("v2-media") { db in
            try db.execute(
                sql: """
                    -- Each user's finished uploads: what the user may send, and what counts against its quota.
                    CREATE TABLE media_owners (
                        user_id INTEGER NOT NULL REFERENCES users(id),
                        sha256 TEXT NOT NULL,
                        size INTEGER NOT NULL,
                        created_ms INTEGER NOT NULL,
                        PRIMARY KEY (user_id, sha256)
                    ) WITHOUT ROWID;
                    -- The media each message carries: who may fetch which bytes (the conversation's members who
                    -- joined before it), with the type and name its sender gave.
                    CREATE TABLE message_media (
                        sha256 TEXT NOT NULL,
                        conversation_id INTEGER NOT NULL,
                        seq INTEGER NOT NULL,
                        mime TEXT NOT NULL,
                        name TEXT NOT NULL,
                        PRIMARY KEY (sha256, conversation_id, seq)
                    ) WITHOUT ROWID;
                    CREATE INDEX message_media_by_message ON message_media(conversation_id, seq);
                    """
            )
        }
        migrator.registerMigration("v3-contacts") { db in
            try db.execute(
                sql: """
                    -- Whether the member has sent a message in the conversation: two users who have both written in
                    -- their direct conversation are contacts (they see each other's presence and typing, and may
                    -- add each other to groups).
                    ALTER TABLE members ADD COLUMN sent INTEGER NOT NULL DEFAULT 0;
                    UPDATE members SET sent = 1 WHERE EXISTS (
                        SELECT 1 FROM messages m WHERE m.conversation_id = members.conversation_id
                        AND m.sender_id = members.user_id
                    );
                    """
            )
        }
        migrator.registerMigration("v4-devices") { db in
            try db.execute(
                sql: """
                    -- When the device's first connection to the running server came (NULL: none now). Cleared at
                    -- each start of a server, which holds no connection then.
                    ALTER TABLE devices ADD COLUMN connected_since_ms INTEGER;
                    -- After a renewal (a password login with the token the device held), the token it replaced: still
                    -- good until the new one is first used, or until previous_token_until_ms (a client that lost the
                    -- new token in a broken connection, or another process of the same app, is not locked out).
                    ALTER TABLE devices ADD COLUMN previous_token_hash BLOB;
                    ALTER TABLE devices ADD COLUMN previous_token_until_ms INTEGER;
                    -- The previous token's own expiry: the grace never makes an expired token good again.
                    ALTER TABLE devices ADD COLUMN previous_expires_ms INTEGER;
                    CREATE UNIQUE INDEX devices_by_previous_token ON devices(previous_token_hash)
                        WHERE previous_token_hash IS NOT NULL;
                    """
            )
        }
        migrator.registerMigration("v5-edits") { db in
            try db.execute(
                sql: """
                    -- An edit replaces body and keeps what it replaced in message_versions (version 0: as first
                    -- sent); edit_count is how many edits there were. reply_seq: the message a reply answers, in the
                    -- same conversation (never changed).
                    ALTER TABLE messages ADD COLUMN edited_ms INTEGER;
                    ALTER TABLE messages ADD COLUMN edit_count INTEGER NOT NULL DEFAULT 0;
                    ALTER TABLE messages ADD COLUMN reply_seq INTEGER;
                    -- A message named by its id alone (a command's `react ID`): ids are unique per sender only.
                    CREATE INDEX messages_by_id ON messages(client_id);
                    CREATE TABLE message_versions (
                        conversation_id INTEGER NOT NULL,
                        seq INTEGER NOT NULL,
                        version INTEGER NOT NULL,
                        body BLOB NOT NULL,
                        replaced_ms INTEGER NOT NULL,
                        PRIMARY KEY (conversation_id, seq, version)
                    ) WITHOUT ROWID;
                    -- One row per (message, key, user): giving a reaction again changes nothing. Keys compare byte
                    -- for byte (they are stored in NFC).
                    CREATE TABLE reactions (
                        conversation_id INTEGER NOT NULL,
                        seq INTEGER NOT NULL,
                        key TEXT NOT NULL,
                        user_id INTEGER NOT NULL,
                        time_ms INTEGER NOT NULL,
                        PRIMARY KEY (conversation_id, seq, key, user_id)
                    ) WITHOUT ROWID;
                    CREATE INDEX reactions_by_user ON reactions(conversation_id, seq, user_id);
                    -- kind 5 edit (conversation, seq, actor = editor); 6 reaction (conversation, seq, actor = who
                    -- reacted, detail = 1 on / 2 off, key).
                    ALTER TABLE events ADD COLUMN key TEXT;
                    """
            )
        }
        migrator.registerMigration("v6-search") { db in
            try db.execute(
                sql: """
                    -- The search index: a message's tokens (SearchText's, and its conversation's; space-separated)
                    -- by a position (doc) that follows the order messages were sent, which search pages by, newest
                    -- first. NULL tokens: a message stored before the index, numbered here and left for
                    -- CourierDatabase.indexPending, which the server runs in batches while it serves. A recalled
                    -- message has no row; an edit sets new tokens.
                    CREATE TABLE message_search (
                        doc INTEGER PRIMARY KEY AUTOINCREMENT,
                        conversation_id INTEGER NOT NULL,
                        seq INTEGER NOT NULL,
                        tokens TEXT,
                        UNIQUE (conversation_id, seq)
                    );
                    CREATE INDEX message_search_pending ON message_search(doc) WHERE tokens IS NULL;
                    -- FTS5 over the tokens, kept in step by the triggers. The ascii tokenizer keeps every non-ASCII
                    -- character in a token, so the tokens come back whole; detail=none: no positions (the exact
                    -- check is Courier's own).
                    CREATE VIRTUAL TABLE message_fts USING fts5(
                        tokens, content='message_search', content_rowid='doc', detail=none, columnsize=0,
                        tokenize='ascii'
                    );
                    CREATE TRIGGER message_search_inserted AFTER INSERT ON message_search
                    WHEN new.tokens IS NOT NULL BEGIN
                        INSERT INTO message_fts(rowid, tokens) VALUES (new.doc, new.tokens);
                    END;
                    CREATE TRIGGER message_search_deleted AFTER DELETE ON message_search
                    WHEN old.tokens IS NOT NULL BEGIN
                        INSERT INTO message_fts(message_fts, rowid, tokens) VALUES ('delete', old.doc, old.tokens);
                    END;
                    CREATE TRIGGER message_search_updated AFTER UPDATE OF tokens ON message_search BEGIN
                        INSERT INTO message_fts(message_fts, rowid, tokens)
                            SELECT 'delete', old.doc, old.tokens WHERE old.tokens IS NOT NULL;
                        INSERT INTO message_fts(rowid, tokens) SELECT new.doc, new.tokens WHERE new.tokens IS NOT NULL;
                    END;
                    """
            )
            try db.execute(sql: Self.numberMessagesForSearch)
        }
        migrator.registerMigration("v7-invites") { db in
            // Invitations to sign up; the token is stored only as its SHA-256.
            try db.execute(
                sql: """
                    CREATE TABLE invites (
                        id INTEGER PRIMARY KEY,
                        token_hash BLOB NOT NULL UNIQUE,
                        created_ms INTEGER NOT NULL,
                        expires_ms INTEGER,
                        max_uses INTEGER NOT NULL,
                        uses INTEGER NOT NULL DEFAULT 0,
                        revoked_ms INTEGER
                    );
                    """
            )
        }
        migrator.registerMigration("v8-profiles") { db in
            // What a user shows of itself beside its name: a display name, an avatar and its thumbnail (images it
            // uploaded, by digest, size, type and pixel size). No row: nothing set.
            try db.execute(
                sql: """
                    CREATE TABLE profiles (
                        user_id INTEGER PRIMARY KEY REFERENCES users(id),
                        display_name TEXT,
                        avatar_sha256 TEXT,
                        avatar_size INTEGER,
                        avatar_mime TEXT,
                        avatar_width INTEGER,
                        avatar_height INTEGER,
                        thumb_sha256 TEXT,
                        thumb_size INTEGER,
                        thumb_mime TEXT,
                        thumb_width INTEGER,
                        thumb_height INTEGER,
                        updated_ms INTEGER NOT NULL
                    );
                    CREATE INDEX profiles_by_avatar ON profiles(avatar_sha256) WHERE avatar_sha256 IS NOT NULL;
                    CREATE INDEX profiles_by_thumb ON profiles(thumb_sha256) WHERE thumb_sha256 IS NOT NULL;
                    """
            )
        }
        migrator.registerMigration("v9-roles") { db in
            // A member's role: 0 member, 1 admin (the owner is the conversation's owner_id).
            try db.execute(sql: "ALTER TABLE members ADD COLUMN role INTEGER NOT NULL DEFAULT 0")
        }
        migrator.registerMigration("v10-quiet") { db in
            try db.execute(
                sql: """
                    -- A group's title, in any script, beside its name (which never changes).
                    ALTER TABLE conversations ADD COLUMN title TEXT;
                    -- How the conversation alerts the member: 0 every message, 1 mentions only, 2 nothing.
                    ALTER TABLE members ADD COLUMN notify INTEGER NOT NULL DEFAULT 0;
                    -- The members a group message mentions (user_id 0: @all); gone when it is recalled.
                    CREATE TABLE mentions (
                        conversation_id INTEGER NOT NULL,
                        user_id INTEGER NOT NULL,
                        seq INTEGER NOT NULL,
                        PRIMARY KEY (conversation_id, seq, user_id)
                    ) WITHOUT ROWID;
                    CREATE INDEX mentions_by_user ON mentions(conversation_id, user_id, seq);
                    -- What each user's name looks like (NameSkeleton): a new name that reads as one is refused.
                    -- Names that read alike from before keep the first's.
                    CREATE TABLE name_skeletons (
                        skeleton TEXT PRIMARY KEY,
                        user_id INTEGER NOT NULL REFERENCES users(id)
                    ) WITHOUT ROWID;
                    INSERT OR IGNORE INTO name_skeletons (skeleton, user_id)
                        SELECT \(SkeletonV10.sqlExpression("name")), id FROM users ORDER BY id;
                    """
            )
        }
        migrator.registerMigration("v11-media-types") { db in
            // Media types stored before they were parsed strictly, respelled (MediaTypeRepair), in the table the
            // media endpoint reads and in the bodies (and earlier versions) delivered to clients.
            // Read through a cursor, keeping only the rows to change: the table may be large, and few need it.
            var changed: [(sha256: String, conversation: Int64, seq: Int64, repaired: String)] = []
            let rows = try Row.fetchCursor(db, sql: "SELECT sha256, conversation_id, seq, mime FROM message_media")
            while let row = try rows.next() {
                let stored: String = row["mime"]
                let repaired = MediaTypeRepair.type(stored)
                if repaired != stored { changed.append((row["sha256"], row["conversation_id"], row["seq"], repaired)) }
            }
            for (sha256, conversation, seq, repaired) in changed {
                try db.execute(
                    sql: "UPDATE message_media SET mime = ? WHERE sha256 = ? AND conversation_id = ? AND seq = ?",
                    arguments: [repaired, sha256, conversation, seq]
                )
                let key = "conversation_id = \(conversation) AND seq = \(seq)"
                if let body = try Data.fetchOne(db, sql: "SELECT body FROM messages WHERE \(key)"),
                    let repairedBody = MediaTypeRepair.body([UInt8](body))
                {
                    try db.execute(sql: "UPDATE messages SET body = ? WHERE \(key)", arguments: [Data(repairedBody)])
                }
                let versions = try Row.fetchAll(db, sql: "SELECT version, body FROM message_versions WHERE \(key)")
                for version in versions {
                    guard let repairedBody = MediaTypeRepair.body([UInt8](version["body"] as Data)) else { continue }
                    try db.execute(
                        sql: "UPDATE message_versions SET body = ? WHERE \(key) AND version = ?",
                        arguments: [Data(repairedBody), version["version"] as Int64]
                    )
                }
            }
        }
        migrator.registerMigration("v12-skeletons") { db in
            // Every name's skeleton worked out again by today's rule (NameSkeleton: UTS #39 over the whole name, marks
            // folded), the oldest of names that read alike keeping it; the accounts themselves are untouched.
            try db.execute(sql: "DELETE FROM name_skeletons")
            for row in try Row.fetchAll(db, sql: "SELECT id, name FROM users ORDER BY id") {
                try db.execute(
                    sql: "INSERT OR IGNORE INTO name_skeletons (skeleton, user_id) VALUES (?, ?)",
                    arguments: [NameSkeleton.of(row["name"] as String), row["id"] as Int64]
                )
            }
        }
        migrator.registerMigration("v13-group-origins") { db in
            try db.execute(
                sql: """
                    -- Who made a group (its first owner, kept when ownership passes on): what the per-maker cap
                    -- counts. Groups from before: their owner now.
                    ALTER TABLE conversations ADD COLUMN creator_id INTEGER;
                    UPDATE conversations SET creator_id = owner_id WHERE kind = 2;
                    CREATE INDEX conversations_by_creator ON conversations(creator_id) WHERE creator_id IS NOT NULL;
                    -- Who put a member in a group (made it with them, or added them; NULL: the administrator, or the
                    -- member itself): what leaving every group one person put one in reads. Members from before:
                    -- the group's owner now, who alone added members then (the owner itself: NULL).
                    ALTER TABLE members ADD COLUMN added_by INTEGER;
                    UPDATE members SET added_by = (
                        SELECT c.owner_id FROM conversations c
                        WHERE c.id = members.conversation_id AND c.kind = 2 AND c.owner_id <> members.user_id
                    );
                    """
            )
        }
        migrator.registerMigration("v14-log-positions") { db in
            try db.execute(
                sql: """
                    -- One counter for every user's log (docs/LOG-DESIGN.md, step 1): a transaction takes its entries'
                    -- positions from it at its end. It starts at the newest cursor any user has, so every cursor a
                    -- device holds stays valid and the stored entries keep theirs.
                    CREATE TABLE log_positions (
                        id INTEGER PRIMARY KEY CHECK (id = 1),
                        last INTEGER NOT NULL
                    );
                    INSERT INTO log_positions (id, last) SELECT 1, COALESCE(max(log_cursor), 0) FROM users;
                    -- Each log's newest cursor, out of the user's row: written only by a transaction that took
                    -- positions, so that appending to a log needs no lock on its user (none before its first entry).
                    CREATE TABLE log_heads (
                        user_id INTEGER PRIMARY KEY,
                        cursor INTEGER NOT NULL
                    );
                    INSERT INTO log_heads (user_id, cursor) SELECT id, log_cursor FROM users WHERE log_cursor > 0;
                    ALTER TABLE users DROP COLUMN log_cursor;
                    """
            )
        }
        migrator.registerMigration("v15-group-events") { db in
            try db.execute(
                sql: """
                    -- A group's messages, each stored once (docs/LOG-DESIGN.md, step 3), at the position every
                    -- member's log grew by; a member's log reads them through its spans of membership. Written only
                    -- by a transaction that took positions, as the logs' entries are.
                    CREATE TABLE group_events (
                        conversation_id INTEGER NOT NULL,
                        cursor INTEGER NOT NULL,
                        seq INTEGER NOT NULL,
                        sender_id INTEGER NOT NULL,
                        PRIMARY KEY (conversation_id, cursor)
                    ) WITHOUT ROWID;
                    -- When each user belonged to each group: the group's messages after from_seq, up to to_seq
                    -- (the seq it left at; the largest integer while it is a member). Their positions lie after
                    -- from_cursor and at most at to_cursor, the log's counter as it stood at the join and at the
                    -- leave (the group's row locked: every message up to the seq had its position by then, and
                    -- none after). A span stays once closed: a device that had not read to the leave still reads
                    -- what came before it.
                    CREATE TABLE group_spans (
                        user_id INTEGER NOT NULL,
                        conversation_id INTEGER NOT NULL,
                        from_seq INTEGER NOT NULL,
                        to_seq INTEGER NOT NULL,
                        from_cursor INTEGER NOT NULL,
                        to_cursor INTEGER NOT NULL,
                        PRIMARY KEY (user_id, conversation_id, from_seq)
                    ) WITHOUT ROWID;
                    INSERT INTO group_spans (user_id, conversation_id, from_seq, to_seq, from_cursor, to_cursor)
                    SELECT m.user_id, m.conversation_id, m.joined_seq, 9223372036854775807,
                        (SELECT last FROM log_positions), 9223372036854775807
                    FROM members m JOIN conversations c ON c.id = m.conversation_id AND c.kind = 2;
                    """
            )
        }
        migrator.registerMigration("v16-push") { db in
            try db.execute(
                sql: """
                    -- Keys the server keeps with its data, made once (the Web Push signing key): credentials, in
                    -- the database's file, which only the server's user reads.
                    CREATE TABLE server_keys (
                        name TEXT PRIMARY KEY,
                        value BLOB NOT NULL,
                        created_ms INTEGER NOT NULL
                    ) WITHOUT ROWID;
                    -- Devices' Web Push subscriptions, by endpoint (a browser's subscription, wherever registered);
                    -- dropped when their device is revoked.
                    CREATE TABLE push_subscriptions (
                        endpoint TEXT PRIMARY KEY,
                        device_id INTEGER NOT NULL REFERENCES devices (id),
                        user_id INTEGER NOT NULL,
                        p256dh BLOB NOT NULL,
                        auth BLOB NOT NULL,
                        created_ms INTEGER NOT NULL
                    );
                    CREATE INDEX push_subscriptions_by_user ON push_subscriptions (user_id);
                    CREATE INDEX push_subscriptions_by_device ON push_subscriptions (device_id);
                    """
            )
        }
        migrator.registerMigration("v17-push-outbox") { db in
            try db.execute(
                sql: """
                    -- How many places a user is pushed to (its Web Push subscriptions): a message to a user with
                    -- none writes nothing to the outbox. Kept by the rules that add and drop subscriptions.
                    ALTER TABLE users ADD COLUMN push_targets INTEGER NOT NULL DEFAULT 0;
                    UPDATE users SET push_targets = (SELECT count(*) FROM push_subscriptions s WHERE s.user_id = users.id);
                    -- Whether a user's notifications show who wrote and what.
                    ALTER TABLE users ADD COLUMN push_previews INTEGER NOT NULL DEFAULT 1;
                    -- The pushes messages owe: one row per message written in its transaction (user and endpoint
                    -- NULL), or one per subscription to try again. A node takes a row by moving due_ms past a
                    -- lease; the row goes once sent.
                    CREATE TABLE push_outbox (
                        id INTEGER PRIMARY KEY AUTOINCREMENT,
                        conversation_id INTEGER NOT NULL,
                        seq INTEGER NOT NULL,
                        user_id INTEGER,
                        endpoint TEXT,
                        attempts INTEGER NOT NULL DEFAULT 0,
                        due_ms INTEGER NOT NULL,
                        claimed_by TEXT,
                        -- How many times a node took it: a row that never gets done (its job fails, or kills its
                        -- node) is given up after a few.
                        claims INTEGER NOT NULL DEFAULT 0
                    );
                    CREATE INDEX push_outbox_by_due ON push_outbox (due_ms, id);
                    """
            )
        }
        migrator.registerMigration("v18-push-gateways") { db in
            try db.execute(
                sql: """
                    -- A phone's registration with a push gateway (Matrix's Push Gateway API) is a push target too:
                    -- its endpoint is a key of the user's (gateway:…), its keys empty, and these say where it goes.
                    ALTER TABLE push_subscriptions ADD COLUMN gateway_url TEXT;
                    ALTER TABLE push_subscriptions ADD COLUMN app_id TEXT;
                    ALTER TABLE push_subscriptions ADD COLUMN pushkey TEXT;
                    """
            )
        }
        migrator.registerMigration("v19-bots") { db in
            try db.execute(
                sql: """
                    -- A bot is a user a program speaks for (courier bot create): its owner is the user who answers
                    -- for it; its profile says it is a bot, for every client to show.
                    ALTER TABLE users ADD COLUMN bot_owner INTEGER;
                    ALTER TABLE profiles ADD COLUMN bot INTEGER NOT NULL DEFAULT 0;
                    """
            )
        }
        migrator.registerMigration("v20-webhooks") { db in
            try db.execute(
                sql: """
                    -- A bot's outgoing webhook: its updates are POSTed to url, signed with secret (Standard
                    -- Webhooks), in order, from cursor on. One node at a time sends them (claimed_by, until
                    -- lease_until_ms); failures back off (attempts, due_ms) and, failing for long enough, disable it.
                    CREATE TABLE webhooks (
                        user_id INTEGER PRIMARY KEY,
                        url TEXT NOT NULL,
                        secret BLOB NOT NULL,
                        created_ms INTEGER NOT NULL,
                        cursor INTEGER NOT NULL,
                        attempts INTEGER NOT NULL DEFAULT 0,
                        due_ms INTEGER NOT NULL DEFAULT 0,
                        failing_since_ms INTEGER,
                        disabled_ms INTEGER,
                        last_error TEXT,
                        claimed_by TEXT,
                        lease_until_ms INTEGER NOT NULL DEFAULT 0
                    );
                    -- Incoming webhooks: a POST to /hooks/<secret> posts into a group as a bot. Only the secret's
                    -- SHA-256 is kept.
                    CREATE TABLE incoming_hooks (
                        id INTEGER PRIMARY KEY AUTOINCREMENT,
                        token_hash BLOB NOT NULL UNIQUE,
                        bot_id INTEGER NOT NULL,
                        group_name TEXT NOT NULL,
                        created_ms INTEGER NOT NULL,
                        revoked_ms INTEGER
                    );
                    """
            )
        }
        migrator.registerMigration("v21-blocks") { db in
            try db.execute(
                sql: """
                    -- Who blocks whom (courier block): the blocked user's direct messages never reach the blocker,
                    -- and it sees none of the blocker's presence, typing, read marks or profile.
                    CREATE TABLE blocks (
                        blocker_id INTEGER NOT NULL,
                        blocked_id INTEGER NOT NULL,
                        created_ms INTEGER NOT NULL,
                        PRIMARY KEY (blocker_id, blocked_id)
                    ) WITHOUT ROWID;
                    CREATE INDEX blocks_by_blocked ON blocks (blocked_id);
                    -- In a direct conversation, the blocker's row says that it blocks the other member (NULL: it does
                    -- not), with its read and delivered marks as they were then, which are all the other sees of
                    -- them: the send path reads it with the members, no lookup of its own.
                    ALTER TABLE members ADD COLUMN blocked_at_seq INTEGER;
                    ALTER TABLE members ADD COLUMN blocked_delivered_seq INTEGER;
                    -- Messages a user does not see: withheld from a blocker, or deleted for that user alone.
                    CREATE TABLE hidden (
                        user_id INTEGER NOT NULL,
                        conversation_id INTEGER NOT NULL,
                        seq INTEGER NOT NULL,
                        PRIMARY KEY (user_id, conversation_id, seq)
                    ) WITHOUT ROWID;
                    CREATE INDEX hidden_by_message ON hidden (conversation_id, seq);
                    """
            )
        }
        migrator.registerMigration("v22-pins") { db in
            try db.execute(
                sql: """
                    -- A conversation's pinned messages (courier pin): who pinned each, and when. A recall unpins.
                    CREATE TABLE pins (
                        conversation_id INTEGER NOT NULL,
                        seq INTEGER NOT NULL,
                        pinned_by INTEGER NOT NULL,
                        pinned_ms INTEGER NOT NULL,
                        PRIMARY KEY (conversation_id, seq)
                    ) WITHOUT ROWID;
                    """
            )
        }
        migrator.registerMigration("v23-search-prefixes") { db in
            // The index holds words' beginnings now (SearchText.prefixLengths), and a media message's file name:
            // every message is indexed again, the newest first, by CourierDatabase.indexPending while the server
            // serves (the triggers take the old tokens out of message_fts).
            try db.execute(sql: "UPDATE message_search SET tokens = NULL WHERE tokens IS NOT NULL")
        }
        migrator.registerMigration("v24-media-collection") { db in
            try db.execute(
                sql: """
                    -- Files nothing names any more, being deleted (MediaService's collection): what would name one
                    -- again (an upload's record) is refused until it is gone.
                    CREATE TABLE media_doomed (
                        sha256 TEXT PRIMARY KEY,
                        since_ms INTEGER NOT NULL
                    ) WITHOUT ROWID;
                    -- The collection asks, file by file, whether an upload record keeps it.
                    CREATE INDEX media_owners_by_sha256 ON media_owners (sha256, created_ms);
                    """
            )
        }
        return migrator
    }
}
