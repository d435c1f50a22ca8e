import CourierPostgresTesting
import CourierProtocol
import CourierServer
import CourierServerTesting
import CourierStorePostgres
import CourierTesting
import PostgresNIO
import Testing

/// An upload whose bytes the database refuses to store, with an error of the database's own (not one of the store's):
/// the client is told, and the upload is not left held, so the next try goes on from where the bytes stand.
@Suite(
    "An upload the database fails",
    .serialized,
    .enabled(if: TestDatabase.isEnabled, Comment(rawValue: TestDatabase.skipReason))
)
struct UploadFailureTests {
    @Test("PostgreSQL refuses an upload's rows: storage-failed, and a new connection resumes it (not upload-busy)")
    func databaseRefusesRows() async throws {
        try await ClusterFixture.with(nodes: 1) { cluster in
            try await cluster.user("alice")
            let port = cluster.nodes[0].ports.native
            // Rows of media_chunks are refused while the switch is on: an error the database raises itself.
            try await TestDatabase.admin(cluster.location) { connection in
                for statement in [
                    "CREATE TABLE refuse_chunks (on_ boolean)",
                    """
                    CREATE FUNCTION refuse_chunk() RETURNS trigger LANGUAGE plpgsql AS $$
                    BEGIN
                        IF EXISTS (SELECT 1 FROM refuse_chunks) THEN RAISE EXCEPTION 'no room for chunks'; END IF;
                        RETURN NEW;
                    END $$
                    """,
                    "CREATE TRIGGER refuse_chunk BEFORE INSERT ON media_chunks FOR EACH ROW EXECUTE FUNCTION refuse_chunk()",
                    "INSERT INTO refuse_chunks VALUES (true)",
                ] {
                    try await connection.query(PostgresQuery(unsafeSQL: statement), logger: TestDatabase.logger)
                }
            }
            let file = SeededRandom.bytes(5 * 1024 * 1024 + 17, seededFor: "databaseRefusesRows")
            let (alice, _) = try await NativeTestClient.login(port: port, "alice", device: "phone")
            let refused = try await alice.upload(file, stream: 1)
            guard case .refused(let error) = refused else {
                Issue.record("the upload was not refused: \(refused)")
                return
            }
            #expect(error.code == ErrorCodes.storageFailed, "\(error)")
            await alice.close()

            try await TestDatabase.admin(cluster.location) { connection in
                try await connection.query("DELETE FROM refuse_chunks", logger: TestDatabase.logger)
            }
            // The upload is not held for the connection that failed: a new one takes it up and finishes it.
            let (again, _) = try await NativeTestClient.login(port: port, "alice", device: "phone")
            let done = try await again.upload(file, stream: 1)
            guard case .done(let info, _) = done else {
                Issue.record("the upload did not finish after the failure: \(done)")
                return
            }
            #expect(info.sha256 == NativeTestClient.sha256(file))
            await again.close()
        }
    }
}
