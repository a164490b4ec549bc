use crate::config::{parse_yaml, DockerEndpoint, DEFAULT_DOCKER_DEBOUNCE};
use std::path::Path;

const TABLE: &str = "listeners: [{ name: http, address: 127.0.0.1:0 }]\nbackends:\n  app-blue: { provider: docker }\n  app-green: { endpoints: [], provider: docker }\n  static: { endpoints: [\"127.0.0.1:9001\"] }\nroutes:\n  - { name: app, primary: app-blue, canary: app-green }\n  - { name: s, hosts: [s.test], primary: static }\n";

fn errors(yaml: &str) -> Vec<String> {
    match parse_yaml(yaml, "t.yaml", Path::new("/etc/weir")) {
        Ok(_) => Vec::new(),
        Err(e) => e
            .errors
            .iter()
            .map(|e| format!("{}: {}", e.path, e.reason))
            .collect(),
    }
}

#[test]
fn the_defaults_and_the_notes_weir_check_prints() {
    let cfg = parse_yaml(
        &format!("{TABLE}providers:\n  docker: {{}}\n"),
        "t.yaml",
        Path::new("/etc/weir"),
    )
    .unwrap();
    let d = cfg.providers.docker.clone().unwrap();
    assert_eq!(
        d.endpoint,
        DockerEndpoint::Unix("/var/run/docker.sock".into())
    );
    assert_eq!(d.endpoint.to_string(), "unix:///var/run/docker.sock");
    assert_eq!(d.network, None);
    assert_eq!(d.debounce, DEFAULT_DOCKER_DEBOUNCE);
    assert_eq!(
        crate::config::provider_notes(&cfg),
        [
            "backends.app-blue: no endpoints in the file; providers.docker fills them from running containers labelled weir.backend=app-blue",
            "backends.app-green: no endpoints in the file; providers.docker fills them from running containers labelled weir.backend=app-green",
        ]
    );
}

#[test]
fn a_backend_without_endpoints_needs_a_provider() {
    assert_eq!(
        errors(TABLE),
        [
            "backends.app-blue.provider: providers.docker is not configured: nothing fills this backend from container labels",
            "backends.app-green.provider: providers.docker is not configured: nothing fills this backend from container labels",
        ]
    );
    // With the provider, only a backend that says so may be empty.
    let plain = TABLE.replace("app-blue: { provider: docker }", "app-blue: {}");
    assert_eq!(
        errors(&format!("{plain}providers:\n  docker: {{}}\n")),
        ["backends.app-blue.endpoints: at least one endpoint is required (or `provider: docker` to fill it from container labels)"]
    );
    let other = TABLE.replace(
        "app-blue: { provider: docker }",
        "app-blue: { provider: consul }",
    );
    assert_eq!(
        errors(&format!("{other}providers:\n  docker: {{}}\n")),
        ["backends.app-blue.provider: unknown provider \"consul\"; expected docker"]
    );
}

#[test]
fn a_provider_no_backend_uses_is_a_warning_and_a_listed_backend_is_noted() {
    let none = "listeners: [{ name: http, address: 127.0.0.1:0 }]\nbackends:\n  s: { endpoints: [\"127.0.0.1:9001\"] }\nroutes:\n  - { name: s, primary: s }\nproviders:\n  docker: {}\n";
    let cfg = parse_yaml(none, "t.yaml", Path::new("/etc/weir")).unwrap();
    let w: Vec<String> = cfg
        .warnings
        .iter()
        .map(|e| format!("{}: {}", e.path, e.reason))
        .collect();
    assert_eq!(
        w,
        ["providers.docker: no backend says `provider: docker`: container labels fill nothing"]
    );
    let listed = none.replace(
        "s: { endpoints: [\"127.0.0.1:9001\"] }",
        "s: { endpoints: [\"127.0.0.1:9001\"], provider: docker }",
    );
    let cfg = parse_yaml(&listed, "t.yaml", Path::new("/etc/weir")).unwrap();
    assert!(cfg.warnings.is_empty(), "{:?}", cfg.warnings);
    assert_eq!(
        crate::config::provider_notes(&cfg),
        ["backends.s: the file's endpoints serve until the first listing; providers.docker fills them from running containers labelled weir.backend=s"]
    );
}

#[test]
fn watch_revision_reads_labels_instead_of_a_revision_path() {
    let canary = "canaries:\n  - name: app\n    route: app\n    watchRevision: true\n    analysis: { interval: 1s, threshold: 2, stepWeight: 50, maxWeight: 50 }\n";
    assert_eq!(
        errors(&format!("{TABLE}{canary}providers:\n  docker: {{}}\n")),
        Vec::<String>::new()
    );
}

#[test]
fn every_bad_field_is_named() {
    let yaml = format!(
        "{TABLE}providers:\n  docker:\n    endpoint: http://docker:2375\n    network: \"\"\n    debounce: soon\n    resyncInterval: 0s\n    timeout: 500ms\n"
    );
    let e = errors(&yaml);
    assert_eq!(e.len(), 5, "{e:?}");
    assert_eq!(e[0], "providers.docker.endpoint: \"http://docker:2375\": expected unix:///path/to/docker.sock or tcp://host:port");
    assert_eq!(e[1], "providers.docker.network: must not be empty");
    assert!(
        e[2].starts_with("providers.docker.debounce: invalid duration \"soon\""),
        "{e:?}"
    );
    assert_eq!(
        e[3],
        "providers.docker.resyncInterval: must be greater than 0"
    );
    assert_eq!(e[4], "providers.docker.timeout: must be at least 1s");
    let yaml = format!(
        "{TABLE}providers:\n  docker:\n    endpoint: unix://docker.sock\n    tls: {{ caFile: ca.pem }}\n"
    );
    assert_eq!(
        errors(&yaml),
        [
            "providers.docker.endpoint: \"unix://docker.sock\": a unix socket needs an absolute path (unix:///var/run/docker.sock)",
            "providers.docker.tls: TLS applies to a tcp:// endpoint only",
        ]
    );
    let yaml = format!(
        "{TABLE}providers:\n  docker:\n    endpoint: tcp://docker:2376\n    tls: {{ caFile: ca.pem }}\n"
    );
    let e = errors(&yaml);
    assert_eq!(e.len(), 2, "{e:?}");
    assert!(
        e[0].starts_with("providers.docker.tls.certFile: required"),
        "{e:?}"
    );
    assert!(
        e[1].starts_with("providers.docker.tls.keyFile: required"),
        "{e:?}"
    );
    let yaml = format!(
        "{TABLE}providers:\n  docker:\n    endpoint: tcp://docker:2376\n    tls: {{ caFile: no-ca.pem, certFile: no-cert.pem, keyFile: no-key.pem }}\n"
    );
    let e = errors(&yaml);
    assert!(
        e.iter()
            .any(|e| e.starts_with("providers.docker.tls.caFile: ")),
        "{e:?}"
    );
    assert!(
        e.iter()
            .any(|e| e.starts_with("providers.docker.tls.certFile: ")),
        "{e:?}"
    );
    let yaml = format!("{TABLE}providers:\n  docker:\n    endpoint: tcp://docker\n");
    let e = errors(&yaml);
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(e[0].starts_with("providers.docker.endpoint: "), "{e:?}");
    let yaml = format!("{TABLE}providers:\n  docker:\n    socket: /x\n");
    let e = errors(&yaml);
    assert!(e[0].contains("socket"), "{e:?}");
    assert_eq!(
        parse_yaml(
            &format!("{TABLE}providers:\n  docker:\n    endpoint: tcp://10.0.0.5:2375\n    network: app-net\n    debounce: 0s\n"),
            "t.yaml",
            Path::new("."),
        )
        .unwrap()
        .providers
        .docker
        .unwrap()
        .endpoint,
        DockerEndpoint::Tcp {
            address: "10.0.0.5:2375".into(),
            tls: None
        }
    );
}
