//! PURE: the networks a config names (`sourceIp`, `trustedProxies`, `peerAllow`).

use ipnet::IpNet;

/// A CIDR (`10.0.0.0/8`, `::1/128`) or a single address, as a network; the error
/// says what was expected.
pub fn parse_network(s: &str) -> Result<IpNet, String> {
    s.parse::<IpNet>()
        .or_else(|_| s.parse::<std::net::IpAddr>().map(IpNet::from))
        .map_err(|_| format!("expected a CIDR such as 10.0.0.0/8 or an address (got {s:?})"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cidrs_and_addresses() {
        assert_eq!(
            parse_network("10.1.0.0/16").unwrap().to_string(),
            "10.1.0.0/16"
        );
        assert_eq!(
            parse_network("192.168.0.7").unwrap().to_string(),
            "192.168.0.7/32"
        );
        assert_eq!(parse_network("::1").unwrap().to_string(), "::1/128");
        assert!(parse_network("ten").unwrap_err().contains("(got \"ten\")"));
    }
}
