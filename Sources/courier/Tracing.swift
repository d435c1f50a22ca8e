import ArgumentParser
import CourierServer
import Foundation
import Logging
import OTel
import ServiceLifecycle
import Tracing

/// `courier serve --otlp-endpoint URL`: the messages' traces (``TraceBook``'s spans) go to an OpenTelemetry
/// collector over OTLP/HTTP, from swift-otel's tracer. Off without the flag.
enum CourierTracing {
    /// The tracer, and the service that batches and exports its spans (it runs first and stops last, so the spans of
    /// the drain go out too).
    static func backend(
        endpoint: String,
        node: String,
        logger: Logger
    ) throws -> (
        tracer: any Tracer, service: any Service
    ) {
        var configuration = OTel.Configuration.default
        configuration.serviceName = "courier"
        configuration.resourceAttributes["service.instance.id"] = node
        configuration.diagnosticLogger = .custom(logger)
        configuration.metrics.enabled = false
        configuration.logs.enabled = false
        configuration.traces.otlpExporter.endpoint = Self.tracesURL(endpoint)
        // Within the unit's stop timeout (30 s), with the drain: a collector that does not answer costs spans only.
        configuration.traces.batchSpanProcessor.exportTimeout = .seconds(5)
        // The OTEL_* variables (OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, OTEL_BSP_SCHEDULE_DELAY, …) apply over these.
        let backend = try OTel.makeTracingBackend(configuration: configuration)
        return (backend.factory, backend.service)
    }

    /// Where the spans go: `endpoint` as given when it names a path, else its `/v1/traces` (the OTLP/HTTP default path
    /// under a collector's address).
    static func tracesURL(_ endpoint: String) -> String {
        guard let url = URLComponents(string: endpoint), url.path.isEmpty || url.path == "/" else { return endpoint }
        return endpoint.hasSuffix("/") ? endpoint + "v1/traces" : endpoint + "/v1/traces"
    }

    /// Whether `endpoint` is an http or https URL with a host, and no query or fragment.
    static func isEndpoint(_ endpoint: String) -> Bool {
        guard let url = URLComponents(string: endpoint), let scheme = url.scheme?.lowercased(),
            scheme == "http" || scheme == "https", let host = url.host, !host.isEmpty, url.query == nil,
            url.fragment == nil
        else { return false }
        return true
    }

    /// The endpoint as `--print-config` shows it: a password in it hidden.
    static func shown(_ endpoint: String) -> String {
        if var url = URLComponents(string: endpoint) {
            guard url.password != nil else { return endpoint }
            url.password = "hidden"
            return url.string ?? "hidden"
        }
        // Not a URL Foundation reads: a password may still stand between "user:" and the last "@".
        let start = endpoint.range(of: "://")?.upperBound ?? endpoint.startIndex
        guard let at = endpoint[start...].lastIndex(of: "@"), let colon = endpoint[start..<at].firstIndex(of: ":")
        else { return endpoint }
        return String(endpoint[...colon]) + "hidden" + String(endpoint[at...])
    }

    /// The `OTEL_*` settings this build cannot honour, which would stop swift-otel (it traps on them): why, for the
    /// first one found; nil when there is none. Only the W3C trace context crosses nodes, over OTLP/HTTP.
    static func unsupported(in environment: [String: String]) -> String? {
        func value(_ name: String) -> String? {
            environment[name].map { $0.trimmingCharacters(in: .whitespaces).lowercased() }.flatMap {
                $0.isEmpty ? nil : $0
            }
        }
        if let propagators = value("OTEL_PROPAGATORS"), propagators != "tracecontext" {
            return "OTEL_PROPAGATORS=\(propagators): only tracecontext (the W3C trace context, which crosses nodes)"
        }
        for name in ["OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"] {
            if let protocolName = value(name), !["http/protobuf", "http/json"].contains(protocolName) {
                return "\(name)=\(protocolName): only http/protobuf or http/json (OTLP over HTTP)"
            }
        }
        if let exporter = value("OTEL_TRACES_EXPORTER"), !["otlp", "console", "none"].contains(exporter) {
            return "OTEL_TRACES_EXPORTER=\(exporter): only otlp, console or none"
        }
        let samplers = [
            "always_on", "always_off", "traceidratio", "parentbased_always_on", "parentbased_always_off",
            "parentbased_traceidratio",
        ]
        if let sampler = value("OTEL_TRACES_SAMPLER"), !samplers.contains(sampler) {
            return "OTEL_TRACES_SAMPLER=\(sampler): one of \(samplers.joined(separator: ", "))"
        }
        return nil
    }
}

extension Serve {
    /// `--otlp-endpoint` (or the file's `otlp-endpoint`): an http(s) URL, and no `OTEL_*` value swift-otel would stop on.
    func validateTracing(environment: [String: String]) throws {
        guard let endpoint = self.otlpEndpoint else { return }
        guard CourierTracing.isEndpoint(endpoint) else {
            throw ValidationError(
                "--otlp-endpoint takes an http:// or https:// URL (no query), not \(CourierTracing.shown(endpoint))"
            )
        }
        if let why = CourierTracing.unsupported(in: environment) {
            throw ValidationError("--otlp-endpoint: \(why)")
        }
    }

    /// With `--otlp-endpoint`: the tracer put in `configuration`, and the exporter's service to run (its failure costs
    /// spans, never the server). Nil without it.
    func tracing(
        _ configuration: inout ServerConfiguration,
        environment: [String: String],
        logger: Logger
    ) throws -> ServiceGroupConfiguration.ServiceConfiguration? {
        guard let endpoint = self.otlpEndpoint else { return nil }
        let node =
            self.node ?? environment["COURIER_NODE"]
            ?? "\(ProcessInfo.processInfo.hostName):\(configuration.nativePort)"
        do {
            let backend = try CourierTracing.backend(endpoint: endpoint, node: node, logger: logger)
            configuration.tracer = backend.tracer
            return .init(
                service: backend.service,
                successTerminationBehavior: .ignore,
                failureTerminationBehavior: .ignore
            )
        } catch {
            throw CommandFailure(description: "--otlp-endpoint: \(error)")
        }
    }
}
