import CourierChat
import Foundation

/// What a listing command prints: on a terminal, its columns under a header, each as wide as its widest cell (by
/// display width: Chinese and Japanese take two columns a character); to a pipe or a file, tab-separated lines
/// without a header, as scripts read them. (`--json` prints each command's own objects: ``printJSON(_:)``.)
struct Table {
    /// The columns' names: the header on a terminal.
    var columns: [String]
    /// The cells, made printable before they reach a terminal.
    var rows: [[Cell]] = []

    /// A cell: text, a number, or nothing (`-`).
    enum Cell {
        case text(String)
        case number(Int64)
        case none

        var shown: String {
            switch self {
            case .text(let text): ChatText.printable(text)
            case .number(let number): String(number)
            case .none: "-"
            }
        }
    }

    /// Whether standard output is a terminal.
    static var onTerminal: Bool { isatty(STDOUT_FILENO) == 1 }

    mutating func add(_ cells: [Cell]) { self.rows.append(cells) }

    /// Prints the table: under a header with aligned columns on a terminal, else as tab-separated lines.
    func print(onTerminal: Bool = Table.onTerminal) {
        for line in self.lines(onTerminal: onTerminal) { Swift.print(line) }
    }

    /// The lines ``print(onTerminal:)`` prints.
    func lines(onTerminal: Bool) -> [String] {
        let lines = self.rows.map { $0.map(\.shown) }
        guard onTerminal else { return lines.map { $0.joined(separator: "\t") } }
        let header = self.columns.map { $0.uppercased() }
        var widths = header.map { DisplayWidth.of($0) }
        for line in lines {
            for (index, cell) in line.enumerated() where index < widths.count {
                widths[index] = max(widths[index], DisplayWidth.of(cell))
            }
        }
        return ([header] + lines).map { line in
            line.enumerated().map { index, cell in
                index == line.count - 1
                    ? cell : cell + String(repeating: " ", count: widths[index] - DisplayWidth.of(cell))
            }.joined(separator: "  ")
        }
    }
}

/// Prints one JSON object a line, keys sorted.
func printJSON(_ object: [String: Any]) throws {
    let data = try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])
    print(String(decoding: data, as: UTF8.self))
}
