/// How long the test clients wait for what must come before they give up: a guard against a test hanging, never a
/// measure. It is long because the whole suite runs at once on CI's two cores, where an answer that takes a
/// millisecond alone can take tens of seconds.
public enum Patience {
    public static let reply: Duration = .seconds(60)
}
