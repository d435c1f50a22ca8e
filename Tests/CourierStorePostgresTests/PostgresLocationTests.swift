import CourierStorePostgres
import Logging
import Testing

@Suite("PostgreSQL locations (postgres:// URLs)")
struct PostgresLocationTests {
    @Test("the forms --database takes: user, percent-encoded password, host, port, database")
    func forms() throws {
        let full = try PostgresLocation(url: "postgres://courier:p%40ss%2Fw%3Ard@db.example:6543/chat")
        #expect(
            full
                == PostgresLocation(
                    host: "db.example",
                    port: 6543,
                    user: "courier",
                    password: "p@ss/w:rd",
                    database: "chat"
                )
        )
        let short = try PostgresLocation(url: "postgresql://me@127.0.0.1/courier")
        #expect(
            short == PostgresLocation(host: "127.0.0.1", port: 5432, user: "me", password: nil, database: "courier")
        )
        let upper = try PostgresLocation(url: "POSTGRES://me:@localhost/courier")
        #expect(upper.password == nil && upper.host == "localhost")
        let v6 = try PostgresLocation(url: "postgres://me:pw@[::1]:5433/courier")
        #expect(v6.host == "::1" && v6.port == 5433)
        #expect(v6.description == "postgres://me@[::1]:5433/courier")
    }

    @Test(
        "what is not a database's location is refused with what is missing",
        arguments: [
            "mysql://me@host/db", "postgres://host/db", "postgres://me@/db", "postgres://me@host",
            "postgres://me@host/",
            "postgres://me@host/db?sslmode=require", "postgres://me@host:0/db", "not a url", "postgres://me@host/db/",
        ]
    )
    func refused(url: String) {
        #expect(throws: PostgresLocation.Invalid.self) { try PostgresLocation(url: url) }
    }

    @Test("the password is never in the description, nor in a refusal")
    func passwordHidden() throws {
        let location = try PostgresLocation(url: "postgres://courier:hunter2-secret@host:5432/db")
        #expect(location.description == "postgres://courier@host:5432/db")
        #expect(!"\(location)".contains("hunter2"))
        let error = #expect(throws: PostgresLocation.Invalid.self) {
            try PostgresLocation(url: "postgres://courier:hunter2-secret@host:5432/")
        }
        #expect(error.map { !$0.description.contains("hunter2") } == true)
        // Nor in what reflection prints (dump, the debugger).
        var dumped = ""
        dump(location, to: &dumped)
        #expect(!dumped.contains("hunter2") && dumped.contains("(hidden)"))
        #expect(!String(reflecting: location).contains("hunter2"))
        let store = PostgresStore(location: location, logger: Logger(label: "test"))
        var dumpedStore = ""
        dump(store, to: &dumpedStore)
        #expect(!dumpedStore.contains("hunter2"))
    }
}
