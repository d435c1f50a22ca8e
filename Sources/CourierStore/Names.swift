/// The rule for user and group names: 1 to 32 ASCII letters, digits, `.`, `_` or `-`, starting with a letter or a
/// digit. Names are unique without regard to case and keep the case they were created with.
public enum Names {
    /// The longest name, in bytes.
    public static let maxLength = 32

    /// Whether a string follows the rule. A string that does not names no user and no group, whatever a lookup by it
    /// would find (SQLite reads a string with a NUL only up to the NUL).
    public static func isValid(_ name: String) -> Bool {
        (try? self.validate(name)) != nil
    }

    /// Checks a name against the rule.
    ///
    /// - Throws: ``CourierStoreError`` with code `invalid-name`, saying what is wrong.
    public static func validate(_ name: String, what: String = "name") throws {
        // The length first, without copying: a hostile name may be a megabyte long.
        let count = name.utf8.count
        guard count >= 1, count <= maxLength else {
            throw CourierStoreError(.invalidName, "a \(what) has 1 to \(maxLength) characters, not \(count)")
        }
        let bytes = Array(name.utf8)
        func isAlphanumeric(_ byte: UInt8) -> Bool {
            (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte)
                || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte)
                || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte)
        }
        guard isAlphanumeric(bytes[0]) else {
            throw CourierStoreError(.invalidName, "a \(what) starts with a letter or a digit")
        }
        for byte in bytes where !isAlphanumeric(byte) && !"._-".utf8.contains(byte) {
            throw CourierStoreError(
                .invalidName,
                "a \(what) has only letters, digits, '.', '_' and '-', not \(String(decoding: [byte], as: UTF8.self).debugDescription)"
            )
        }
    }
}

extension Names {
    /// Names no new user takes: the words a mention of everyone may be written with elsewhere (`all` is what `@all`
    /// mentions here, ``Mentions``), and the names a reader takes for the server's own voice.
    public static let reservedUserNames: Set<String> = [
        Mentions.everyoneWord, "everyone", "here", "channel", "admin", "root", "system", "support", "courier",
    ]

    /// Checks a new user's name: the rule, and not a reserved word nor one that reads as one (``NameSkeleton``).
    ///
    /// - Throws: `invalid-name`.
    public static func validateNew(userName name: String) throws {
        try self.validate(name, what: "user name")
        let skeleton = NameSkeleton.of(name)
        guard let reserved = self.reservedUserNames.first(where: { NameSkeleton.of($0) == skeleton }) else { return }
        if reserved == Mentions.everyoneWord {
            throw CourierStoreError(.invalidName, "\(name) is reserved: @\(reserved) mentions every member of a group")
        }
        throw CourierStoreError(.invalidName, "\(name) is reserved: it reads as \(reserved), which no user may take")
    }
}

/// The rule for other strings a client chooses and the store keeps or looks up (message ids, device names): no
/// control characters (C0, DEL, C1), NUL above all, which SQLite would take as the string's end, so that two
/// different ids could be stored as one; and no bidirectional embedding, override or isolate (U+202A–U+202E,
/// U+2066–U+2069), which would make a name shown to others read as something else. Right-to-left text itself (Arabic,
/// Hebrew) is fine.
public enum StoreText {
    /// Whether a string has no control characters and no bidirectional controls.
    public static func isClean(_ text: String) -> Bool {
        // The control characters (general category Cc) are exactly U+0000-001F and U+007F-009F: no table read.
        !text.unicodeScalars.contains { scalar in
            let value = scalar.value
            return value < 0x20 || (0x7F...0x9F).contains(value) || (0x202A...0x202E).contains(value)
                || (0x2066...0x2069).contains(value)
        }
    }

    /// Checks a string against the rule and a length in UTF-8 bytes.
    ///
    /// - Throws: ``CourierStoreError`` with code `invalid-request`, naming `what`.
    public static func check(_ text: String, what: String, maxBytes: Int) throws {
        guard text.utf8.count <= maxBytes else {
            throw CourierStoreError(.invalidRequest, "a \(what) has at most \(maxBytes) bytes")
        }
        guard self.isClean(text) else {
            throw CourierStoreError(
                .invalidRequest,
                "a \(what) has no control characters (bidirectional ones included)"
            )
        }
    }
}

extension Conversation {
    /// Refuses an address whose name breaks the naming rule before any lookup: it names no user and no group.
    ///
    /// - Throws: `unknown-user` or `unknown-group`.
    package func checkNames() throws {
        switch self {
        case .user(let name) where !Names.isValid(name):
            throw CourierStoreError(.unknownUser, "no user named \(name.debugDescription)")
        case .group(let name) where !Names.isValid(name):
            throw CourierStoreError(.unknownGroup, "no group named \(name.debugDescription)")
        default:
            return
        }
    }
}

/// What a user name looks like, so that a new name that reads as an existing one is refused: `bob1` beside `bobl`,
/// `O1iver` beside `olIver`, `rnary` beside `mary`, `clave` beside `dave`, `vvvfan` beside `vwfan`, `oliver.` beside
/// `oliver`, `anna..lee` beside `anna.lee`.
///
/// It is UTS #39's skeleton over the whole name, for the characters a name may hold: each character is mapped on its
/// own (never a pair read left to right, so `vvv` and `vw` meet) to its prototype in Unicode's confusables data
/// (`0` as `O`, `1` and `I` as `l`, `m` as `rn`), with two more pairs fonts draw alike (`d` as `cl`, `w` as `vv`);
/// then case is folded (names are one without regard to case); then punctuation, which a reader skims: `.`, `-`
/// and `_` are one mark, a run of them is one, and marks at the end are dropped. A lowercase `i` keeps its dot and
/// stays itself.
public enum NameSkeleton {
    /// Each character's prototype, before case is folded (UTS #39, confusables.txt, for the ASCII a name holds).
    static let prototypes: [Character: String] = ["0": "O", "1": "l", "I": "l"]
    /// Each character's prototype once case is folded: confusables.txt's `m`, and Courier's `d` and `w`.
    static let foldedPrototypes: [Character: String] = ["m": "rn", "d": "cl", "w": "vv"]
    static let marks: Set<Character> = [".", "-", "_"]

    /// A name's skeleton.
    public static func of(_ name: String) -> String {
        var folded = ""
        for character in name { folded += self.prototypes[character] ?? String(character) }
        var skeleton = ""
        var pendingMark = false
        for character in folded.lowercased() {
            if self.marks.contains(character) {
                pendingMark = !skeleton.isEmpty
                continue
            }
            if pendingMark { skeleton += "_" }
            pendingMark = false
            skeleton += self.foldedPrototypes[character] ?? String(character)
        }
        return skeleton
    }
}

extension NameSkeleton {
    /// What a display name reads as, to compare with user names: its compatibility form (NFKC: full-width letters
    /// as the letters they are), Cyrillic and Greek letters that look Latin as those (`оliver` with a Cyrillic `о`
    /// is oliver), an `@` before it and marks around it dropped, then ``of(_:)`` as written and in lower case (a
    /// display name keeps its case: `OLIVER` reads as oliver, though a capital I alone reads as an l).
    public static func ofDisplayName(_ name: String) -> Set<String> {
        var folded = ""
        for scalar in name.precomposedStringWithCompatibilityMapping.unicodeScalars {
            folded.unicodeScalars.append(contentsOf: (self.latinLookalikes[scalar] ?? String(scalar)).unicodeScalars)
        }
        let trimmed = String(
            folded.drop { !$0.isLetter && !$0.isNumber }.reversed().drop { !$0.isLetter && !$0.isNumber }.reversed()
        )
        return [Self.of(trimmed), Self.of(trimmed.lowercased())]
    }

    /// Cyrillic and Greek letters drawn as Latin ones (from Unicode's confusables data).
    static let latinLookalikes: [Unicode.Scalar: String] = {
        let pairs: [(String, String)] = [
            ("а", "a"), ("в", "b"), ("е", "e"), ("ё", "e"), ("һ", "h"), ("і", "i"), ("ј", "j"), ("к", "k"), ("м", "m"),
            ("н", "h"), ("о", "o"), ("р", "p"), ("с", "c"), ("т", "t"), ("у", "y"), ("х", "x"), ("ѕ", "s"), ("ԁ", "d"),
            ("ԛ", "q"), ("ԝ", "w"), ("ɡ", "g"), ("А", "A"), ("В", "B"), ("Е", "E"), ("К", "K"), ("М", "M"), ("Н", "H"),
            ("О", "O"), ("Р", "P"), ("С", "C"), ("Т", "T"), ("Х", "X"), ("У", "Y"), ("Ѕ", "S"), ("І", "I"), ("Ј", "J"),
            ("α", "a"), ("ο", "o"), ("ρ", "p"), ("ν", "v"), ("τ", "t"), ("υ", "u"), ("ι", "i"), ("κ", "k"), ("χ", "x"),
            ("ε", "e"), ("Α", "A"), ("Β", "B"), ("Ε", "E"), ("Ζ", "Z"), ("Η", "H"), ("Ι", "I"), ("Κ", "K"), ("Μ", "M"),
            ("Ν", "N"), ("Ο", "O"), ("Ρ", "P"), ("Τ", "T"), ("Υ", "Y"), ("Χ", "X"),
        ]
        return Dictionary(uniqueKeysWithValues: pairs.map { ($0.0.unicodeScalars.first!, $0.1) })
    }()
}

/// The skeletons migration `v10-quiet` gave the names of its day (a fold read left to right, kept as it shipped: a
/// migration never changes). `v12-skeletons` works them out again with ``NameSkeleton``.
package enum SkeletonV10 {
    static let before: [(String, String)] = [("I", "l"), ("1", "l"), ("O", "o"), ("0", "o")]
    static let after: [(String, String)] = [("rn", "m"), ("vv", "w"), (".", "_"), ("-", "_")]

    /// The replacements in SQL (SQLite's and PostgreSQL's `replace` and `lower` agree on ASCII), over a column.
    package static func sqlExpression(_ column: String) -> String {
        var expression = column
        for (from, to) in self.before { expression = "replace(\(expression), '\(from)', '\(to)')" }
        expression = "lower(\(expression))"
        for (from, to) in self.after { expression = "replace(\(expression), '\(from)', '\(to)')" }
        return expression
    }
}
