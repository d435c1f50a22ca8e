import Foundation
import NIOHTTP1
import Testing

@testable import MediaCache

@Suite("MediaCache credentials (no sockets)")
struct CredentialsTests {
    static let parameters = MediaCacheConfiguration(cacheDirectory: URL(fileURLWithPath: "/nonexistent"))
        .credentialParameters

    @Test("credential parameters go however the URL spells their names, and so do a user and password")
    func stripped() throws {
        let cases: [(String, String)] = [
            ("https://o.example/v.mp4?token=s3cret&q=1", "https://o.example/v.mp4?q=1"),
            ("https://o.example/v.mp4?%74oken=s3cret&q=1", "https://o.example/v.mp4?q=1"),
            ("https://o.example/v.mp4?TOKEN=s3cret", "https://o.example/v.mp4"),
            ("https://o.example/v.mp4?access%5Ftoken=s3cret&q=1", "https://o.example/v.mp4?q=1"),
            ("https://me:s3cret@o.example/v.mp4?q=1", "https://o.example/v.mp4?q=1"),
            ("https://o.example/v.mp4?q=%74oken", "https://o.example/v.mp4?q=%74oken"),
            // Spellings a framework reads as the same name: a NUL or other control or space, an array's brackets.
            ("https://o.example/v.mp4?Token%00=s3cret&q=1", "https://o.example/v.mp4?q=1"),
            ("https://o.example/v.mp4?token[]=s3cret&q=1", "https://o.example/v.mp4?q=1"),
            ("https://o.example/v.mp4?token%5B0%5D=s3cret&q=1", "https://o.example/v.mp4?q=1"),
            ("https://o.example/v.mp4?%20token=s3cret&q=1", "https://o.example/v.mp4?q=1"),
            ("https://o.example/v.mp4?to%0Aken=s3cret&q=1", "https://o.example/v.mp4?q=1"),
            ("https://o.example/v.mp4?tokenizer=1", "https://o.example/v.mp4?tokenizer=1"),
        ]
        for (given, expected) in cases {
            let url = try #require(URL(string: given))
            let result = Credentials.stripped(url, parameters: Self.parameters).absoluteString
            #expect(result == expected, "\(given)")
            #expect(!result.contains("s3cret"))
        }
    }

    @Test("every spelling of a credential gives its own key; the same credential gives the same key")
    func digests() throws {
        func digest(_ text: String, _ headers: HTTPHeaders = [:]) throws -> String? {
            Credentials(url: try #require(URL(string: text)), headers: headers, parameters: Self.parameters).digest
        }
        #expect(try digest("https://o.example/v.mp4?q=1") == nil)
        let token = try digest("https://o.example/v.mp4?token=a")
        #expect(token != nil)
        #expect(try digest("https://o.example/v.mp4?%74oken=a") == token)
        #expect(try digest("https://o.example/v.mp4?token=b") != token)
        #expect(try digest("https://me:a@o.example/v.mp4") != nil)
        #expect(try digest("https://me:a@o.example/v.mp4") != digest("https://me:b@o.example/v.mp4"))
        #expect(try digest("https://o.example/v.mp4", ["Cookie": "s=1"]) != nil)
    }

    @Test(
        "a redirect keeps the player's credentials only within one origin (scheme, host, port); https to http is refused"
    )
    func redirectCredentials() throws {
        var headers = HTTPHeaders()
        headers.add(name: "Cookie", value: "s=1")
        headers.add(name: "Authorization", value: "Bearer t")
        headers.add(name: "Referer", value: "https://app.example/")
        func after(_ from: String, _ to: String) throws -> [String] {
            try OriginClient.headers(forRedirectFrom: URL(string: from)!, to: URL(string: to)!, headers).map(\.name)
        }
        let all = ["Cookie", "Authorization", "Referer"]
        #expect(try after("http://o.example/a", "http://O.EXAMPLE:80/b") == all)
        #expect(try after("https://o.example/a", "https://o.example:443/b") == all)
        // Another port, another host, another scheme: the credentials stay behind; the rest goes on.
        #expect(try after("http://o.example:8080/a", "http://o.example:9090/b") == ["Referer"])
        #expect(try after("http://o.example/a", "http://p.example/b") == ["Referer"])
        #expect(try after("http://o.example/a", "https://o.example/b") == ["Referer"])
        #expect(throws: MediaCacheError.self) { try after("https://o.example/a", "http://o.example/b") }
    }
}
