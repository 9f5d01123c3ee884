//! Which network addresses the service may fetch media from.
//!
//! A URL in a request is fetched by the server, so without a check a client
//! could make the server read its own loopback services, the cloud metadata
//! endpoint (169.254.169.254) or hosts on the private network behind it
//! (server-side request forgery). Only globally routable unicast addresses
//! pass; everything special-purpose in the IANA registries that is not meant
//! to be reached on the public internet is refused, including IPv6 forms that
//! embed such an IPv4 address.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Why an address is refused, for error messages.
pub fn refusal_reason(address: IpAddr) -> Option<&'static str> {
    match address {
        IpAddr::V4(address) => ipv4_refusal(address),
        IpAddr::V6(address) => ipv6_refusal(address),
    }
}

/// True when the address may not be fetched from (unless the private
/// network is explicitly allowed).
pub fn is_forbidden(address: IpAddr) -> bool {
    refusal_reason(address).is_some()
}

fn ipv4_refusal(address: Ipv4Addr) -> Option<&'static str> {
    let [a, b, c, _] = address.octets();
    let reason = match (a, b, c) {
        (0, _, _) => "an unspecified (0.0.0.0/8) address",
        (10, _, _) => "a private (10.0.0.0/8) address",
        (100, 64..=127, _) => "a shared carrier-grade NAT (100.64.0.0/10) address",
        (127, _, _) => "a loopback address",
        (169, 254, _) => "a link-local address",
        (172, 16..=31, _) => "a private (172.16.0.0/12) address",
        (192, 0, 0) => "an IETF protocol assignment (192.0.0.0/24)",
        (192, 0, 2) | (198, 51, 100) | (203, 0, 113) => "a documentation address",
        (192, 88, 99) => "a 6to4 relay anycast address",
        (192, 168, _) => "a private (192.168.0.0/16) address",
        (198, 18..=19, _) => "a benchmarking (198.18.0.0/15) address",
        (224..=239, _, _) => "a multicast address",
        // 240.0.0.0/4 is reserved and ends with the limited broadcast address.
        (240..=255, _, _) => "a reserved or broadcast address",
        _ => return None,
    };
    Some(reason)
}

fn ipv6_refusal(address: Ipv6Addr) -> Option<&'static str> {
    if address.is_unspecified() {
        return Some("an unspecified address");
    }
    if address.is_loopback() {
        return Some("a loopback address");
    }
    let segments = address.segments();
    let octets = address.octets();
    let embedded_ipv4 = |start: usize| {
        Ipv4Addr::new(
            octets[start],
            octets[start + 1],
            octets[start + 2],
            octets[start + 3],
        )
    };
    // IPv4-mapped (::ffff:a.b.c.d), IPv4-translated (::ffff:0:a.b.c.d,
    // RFC 2765's SIIT form) and the deprecated IPv4-compatible (::a.b.c.d)
    // forms reach the embedded IPv4 address, and so does the well-known
    // NAT64 prefix 64:ff9b::/96; each is judged by that address.
    let is_mapped = segments[..5] == [0; 5] && segments[5] == 0xffff;
    let is_translated = segments[..4] == [0; 4] && segments[4] == 0xffff && segments[5] == 0;
    let is_compatible = segments[..6] == [0; 6];
    let is_nat64 = segments[..6] == [0x64, 0xff9b, 0, 0, 0, 0];
    if is_mapped || is_translated || is_compatible || is_nat64 {
        return ipv4_refusal(embedded_ipv4(12));
    }
    // 6to4 (2002::/16) carries an IPv4 address in its next 32 bits.
    if segments[0] == 0x2002 {
        return ipv4_refusal(embedded_ipv4(2));
    }
    let reason = match segments[0] {
        0x0064 if segments[1] == 0xff9b && segments[2] == 1 => "a local-use NAT64 address",
        // The rest of ::/8 is reserved by the IETF; nothing public lives
        // there, and any other IPv4-embedding form would too.
        0x0000..=0x00ff => "a reserved (::/8) address",
        0x0100 if segments[1..4] == [0, 0, 0] => "a discard-only address",
        // Teredo hides an obfuscated IPv4 address; refusing the prefix is
        // simpler than decoding it.
        0x2001 if segments[1] == 0 => "a Teredo address",
        0x2001 if segments[1] == 2 && segments[2] == 0 => "a benchmarking address",
        0x2001 if segments[1] == 0x0db8 => "a documentation address",
        0x3fff if segments[1] <= 0x0fff => "a documentation address",
        0xfc00..=0xfdff => "a unique local (fc00::/7) address",
        0xfe80..=0xfebf => "a link-local address",
        0xfec0..=0xfeff => "a site-local address",
        0xff00..=0xffff => "a multicast address",
        _ => return None,
    };
    Some(reason)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn forbidden(text: &str) -> bool {
        is_forbidden(text.parse().unwrap())
    }

    #[test]
    fn refuses_every_special_purpose_ipv4_range() {
        for address in [
            "0.0.0.0",
            "0.1.2.3",
            "10.0.0.1",
            "10.255.255.255",
            "100.64.0.1",
            "100.127.255.255",
            "127.0.0.1",
            "127.9.9.9",
            "169.254.169.254",
            "172.16.0.1",
            "172.31.255.255",
            "192.0.0.8",
            "192.0.2.1",
            "192.88.99.1",
            "192.168.1.1",
            "198.18.0.1",
            "198.19.255.255",
            "198.51.100.7",
            "203.0.113.9",
            "224.0.0.1",
            "239.255.255.250",
            "240.0.0.1",
            "255.255.255.255",
        ] {
            assert!(forbidden(address), "{address} should be refused");
        }
    }

    #[test]
    fn allows_public_ipv4_next_to_the_ranges() {
        for address in [
            "1.1.1.1",
            "8.8.8.8",
            "11.0.0.1",
            "100.63.255.255",
            "100.128.0.0",
            "169.253.1.1",
            "172.15.255.255",
            "172.32.0.0",
            "192.0.1.1",
            "192.167.1.1",
            "198.17.0.1",
            "198.20.0.1",
            "223.255.255.255",
        ] {
            assert!(!forbidden(address), "{address} should be allowed");
        }
    }

    #[test]
    fn refuses_special_ipv6_ranges_and_embedded_private_ipv4() {
        for address in [
            "::",
            "::1",
            "::ffff:127.0.0.1",
            "::ffff:10.1.2.3",
            "::ffff:169.254.169.254",
            "::ffff:0:127.0.0.1",
            "::ffff:0:10.0.0.1",
            "::ffff:0:169.254.169.254",
            "::ffff:0:0:1",
            "::127.0.0.1",
            "::10.0.0.1",
            "64:ff9b::192.168.0.1",
            "64:ff9b:1::1",
            "100::1",
            "2001::1",
            "2001:2::1",
            "2001:db8::1",
            "2002:0a00:0001::1",
            "2002:7f00:0001::",
            "2002:a9fe:a9fe::1",
            "64:ff9b::127.0.0.1",
            "64:ff9b::a9fe:a9fe",
            "::1:0:0:1",
            "3fff::1",
            "fc00::1",
            "fd12:3456::1",
            "fe80::1",
            "fec0::1",
            "ff02::1",
        ] {
            assert!(forbidden(address), "{address} should be refused");
        }
    }

    #[test]
    fn allows_public_ipv6_and_public_embedded_ipv4() {
        for address in [
            "2606:4700:4700::1111",
            "2a00:1450:4001:80b::200e",
            "::ffff:8.8.8.8",
            "::ffff:0:8.8.8.8",
            "64:ff9b::8.8.8.8",
            "2002:0808:0808::1",
            "2001:4860::8888",
        ] {
            assert!(!forbidden(address), "{address} should be allowed");
        }
    }
}
