import ArgumentParser
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

    /// Whether `endpoint` is an http or https URL with a host.
    static func isEndpoint(_ endpoint: String) -> Bool {
        guard let url = URLComponents(string: endpoint), let scheme = url.scheme?.lowercased(),
            scheme == "http" || scheme == "https", let host = url.host, !host.isEmpty
        else { return false }
        return true
    }
}
