//! The addresses a sandbox's DNS stub gives out: one of its own per name, per sandbox, from
//! 198.18.0.0/15 (RFC 2544's benchmarking block, which no public host uses), so that a
//! connection captured transparently (see [`transparent`](crate::transparent)) is decided by the
//! name the command looked up, never by an address several names share.
//!
//! Why addresses of our own rather than the host's answers with a per-address table:
//!
//! - two names behind one CDN address would share one decision (the last name looked up would
//!   win, and a sandbox could look up an allowed name to open the address for a refused one);
//! - nothing is resolved on the host before a connection is decided: a lookup carries no data out
//!   and asks nobody, and the name is resolved at connect time, where the address guard runs on
//!   what the host resolver says then (not on what it said at lookup time);
//! - a table per sandbox: a sandbox learns no other sandbox's names (its addresses are given in
//!   the order it asked, from the start of the block).
//!
//! An address is never given to a second name while its sandbox lives (a client may hold it in a
//! cache): the table stops giving out addresses at [`CAPACITY`] names, and the stub then answers
//! SERVFAIL for new names (said in its event).

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Mutex;

use sandgate_config::DomainName;

/// The block the addresses come from.
pub const BLOCK: (Ipv4Addr, u8) = (Ipv4Addr::new(198, 18, 0, 0), 15);
/// Names one sandbox may be given addresses for (the block holds 131,072 addresses; a name costs
/// its text, ~100 bytes, so a sandbox that looks up random names holds a few MiB at most).
pub const CAPACITY: usize = 16_384;

/// Whether `ip` lies in [`BLOCK`] (given out by the stub, or looking like it).
pub fn in_block(ip: IpAddr) -> bool {
    match sandgate_config::canonical_ip(ip) {
        IpAddr::V4(v4) => u32::from(v4) >> (32 - BLOCK.1) == u32::from(BLOCK.0) >> (32 - BLOCK.1),
        IpAddr::V6(_) => false,
    }
}

/// What an address means to one sandbox.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Lookup {
    /// The stub gave it for this name.
    Name(DomainName),
    /// In the block, but never given to this sandbox.
    NotGiven,
    /// Not in the block: a real address.
    Real,
}

/// One sandbox's table.
#[derive(Debug, Default)]
pub struct Names {
    inner: Mutex<Table>,
}

#[derive(Debug, Default)]
struct Table {
    by_name: HashMap<DomainName, u32>,
    /// Index `i` is the name of the `i`-th address given out ([`address`]).
    names: Vec<DomainName>,
}

/// The `i`-th address given out: the block's addresses in order, leaving out those ending in .0
/// and .255 (some clients take them for network or broadcast addresses).
fn address(i: usize) -> Ipv4Addr {
    let skipped = i / 254 * 256 + i % 254 + 1;
    Ipv4Addr::from(u32::from(BLOCK.0) + skipped as u32)
}

/// The index of `ip` among the addresses given out, if it is one of them.
fn index(ip: Ipv4Addr) -> Option<usize> {
    let offset = u32::from(ip).checked_sub(u32::from(BLOCK.0))? as usize;
    let (hi, lo) = (offset / 256, offset % 256);
    (lo != 0 && lo != 255).then(|| hi * 254 + lo - 1)
}

impl Names {
    /// The address of `name`, given now if it has none; `None` when [`CAPACITY`] names have one.
    pub fn address_for(&self, name: &DomainName) -> Option<Ipv4Addr> {
        let mut t = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(&i) = t.by_name.get(name) {
            return Some(address(i as usize));
        }
        let i = t.names.len();
        if i >= CAPACITY {
            return None;
        }
        t.names.push(name.clone());
        t.by_name.insert(name.clone(), i as u32);
        Some(address(i))
    }

    /// What `ip` means to this sandbox.
    pub fn lookup(&self, ip: IpAddr) -> Lookup {
        let ip = sandgate_config::canonical_ip(ip);
        let IpAddr::V4(v4) = ip else { return Lookup::Real };
        if !in_block(ip) {
            return Lookup::Real;
        }
        let t = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        match index(v4).and_then(|i| t.names.get(i)) {
            Some(name) => Lookup::Name(name.clone()),
            None => Lookup::NotGiven,
        }
    }

    /// How many names have an address.
    pub fn len(&self) -> usize {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).names.len()
    }

    /// Whether no name has one.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(s: &str) -> DomainName {
        match sandgate_config::Host::parse(s).unwrap() {
            sandgate_config::Host::Name(n) => n,
            sandgate_config::Host::Ip(_) => unreachable!(),
        }
    }

    #[test]
    fn one_address_per_name_and_back() {
        let t = Names::default();
        let a = t.address_for(&name("a.example")).unwrap();
        let b = t.address_for(&name("b.example")).unwrap();
        assert_ne!(a, b);
        assert_eq!(t.address_for(&name("a.example")), Some(a), "stable");
        assert_eq!(t.lookup(a.into()), Lookup::Name(name("a.example")));
        assert_eq!(t.lookup(b.into()), Lookup::Name(name("b.example")));
        assert_eq!(a, Ipv4Addr::new(198, 18, 0, 1));
        // An address of the block not given out, and one outside it.
        assert_eq!(t.lookup(Ipv4Addr::new(198, 19, 4, 4).into()), Lookup::NotGiven);
        assert_eq!(t.lookup(Ipv4Addr::new(198, 18, 0, 0).into()), Lookup::NotGiven);
        assert_eq!(t.lookup(Ipv4Addr::new(198, 20, 0, 1).into()), Lookup::Real);
        assert_eq!(t.lookup("::ffff:198.18.0.1".parse().unwrap()), Lookup::Name(name("a.example")));
        assert_eq!(t.lookup("2001:db8::1".parse().unwrap()), Lookup::Real);
    }

    #[test]
    fn sandboxes_do_not_share_a_table() {
        let (one, two) = (Names::default(), Names::default());
        let a = one.address_for(&name("secret.example")).unwrap();
        assert_eq!(two.lookup(a.into()), Lookup::NotGiven);
        let b = two.address_for(&name("other.example")).unwrap();
        assert_eq!(a, b, "each table starts at the block's start");
        assert_eq!(one.lookup(a.into()), Lookup::Name(name("secret.example")));
        assert_eq!(two.lookup(b.into()), Lookup::Name(name("other.example")));
    }

    #[test]
    fn addresses_skip_network_and_broadcast_ends_and_stay_in_the_block() {
        for i in [0, 1, 253, 254, 255, 508, CAPACITY - 1, 131_072 / 256 * 254 - 1] {
            let a = address(i);
            assert!(in_block(a.into()), "{i}: {a}");
            assert!(!matches!(a.octets()[3], 0 | 255), "{i}: {a}");
            assert_eq!(index(a), Some(i), "{i}: {a}");
        }
        assert_eq!(address(253), Ipv4Addr::new(198, 18, 0, 254));
        assert_eq!(address(254), Ipv4Addr::new(198, 18, 1, 1));
        assert_eq!(index(Ipv4Addr::new(198, 18, 1, 255)), None);
    }

    #[test]
    fn the_table_stops_at_its_capacity_and_never_reuses_an_address() {
        let t = Names::default();
        let mut seen = std::collections::HashSet::new();
        for i in 0..CAPACITY {
            let a = t.address_for(&name(&format!("n{i}.example"))).unwrap();
            assert!(seen.insert(a), "{a} given twice");
        }
        assert_eq!(t.address_for(&name("one-more.example")), None);
        assert_eq!(t.address_for(&name("n7.example")), Some(address(7)), "old names keep theirs");
        assert_eq!(t.len(), CAPACITY);
    }
}
