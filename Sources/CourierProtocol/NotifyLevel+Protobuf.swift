public import CourierVocabulary

extension Courier_V1_NotifyLevel {
    public init(_ level: NotifyLevel) {
        switch level {
        case .all: self = .all
        case .mentions: self = .mentions
        case .none: self = .none
        }
    }
}

extension NotifyLevel {
    /// A level the protocol carries; nil for one this server does not know.
    public init?(_ level: Courier_V1_NotifyLevel) {
        switch level {
        case .all: self = .all
        case .mentions: self = .mentions
        case .none: self = .none
        case .UNRECOGNIZED: return nil
        }
    }
}
