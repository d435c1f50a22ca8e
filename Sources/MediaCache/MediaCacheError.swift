/// An error of the media cache: a code to match on, and a message for people.
public struct MediaCacheError: Error, Hashable, Sendable, CustomStringConvertible {
    /// What went wrong, as a value that can grow new cases without breaking callers.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Value: Hashable, Sendable {
            case notAllowed, badOrigin, tooManyRedirects, upstream, changed, tooLarge, notFound
        }
        private let value: Value

        /// The origin's scheme is not http or https, or its host is not in the allow-list.
        public static let notAllowed = Code(value: .notAllowed)
        /// The request names no origin URL the proxy can use.
        public static let badOrigin = Code(value: .badOrigin)
        /// The origin redirected more than ``MediaCacheConfiguration/maxRedirects`` times.
        public static let tooManyRedirects = Code(value: .tooManyRedirects)
        /// The origin failed: unreachable, timed out, reset, or answered an error status.
        public static let upstream = Code(value: .upstream)
        /// The resource changed at the origin while it was being served.
        public static let changed = Code(value: .changed)
        /// A playlist or key is larger than the proxy accepts.
        public static let tooLarge = Code(value: .tooLarge)
        /// Nothing is cached for the URL.
        public static let notFound = Code(value: .notFound)

        public var description: String { String(describing: self.value) }
    }

    public var code: Code
    public var message: String

    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { "\(self.code): \(self.message)" }
}
