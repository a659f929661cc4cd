//! The built-in workloads by name, with the knobs that size them, shared by
//! `styxd --preload`, `styx bench … --connect` and `styx verify`.
//!
//! A daemon and the client that drives it must agree on a workload's
//! shape: the daemon serves the application and holds the initial state,
//! the client draws requests and checks the final state against both. Both
//! sides build the workload here from the same [`Knobs`], with the
//! partition counts of [`crate::apps`], so that they agree by construction.
//!
//! [`Workload`] has associated types, so code that must run on "whichever
//! workload was named" implements [`Visit`] and is handed the concrete one.

use crate::apps::{GEO_PARTITIONS, PARTITIONS};
use clap::{Args, ValueEnum};
use std::fmt;
use styx_bench::deathstar::{movie, travel};
use styx_bench::inproc::{Movie, Tpcc, Travel, Ycsbt};
use styx_bench::runner::Workload;
use styx_bench::tpcc;
use styx_engine::App;

/// A built-in workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Name {
    Ycsbt,
    Tpcc,
    Movie,
    Travel,
}

impl Name {
    pub fn as_str(self) -> &'static str {
        match self {
            Name::Ycsbt => "ycsbt",
            Name::Tpcc => "tpcc",
            Name::Movie => "movie",
            Name::Travel => "travel",
        }
    }

    pub fn parse(name: &str) -> Option<Name> {
        <Name as ValueEnum>::from_str(name, true).ok()
    }
}

impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How much TPC-C to load per warehouse.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum TpccScale {
    /// TPC-C's cardinalities: 100 000 items, 3 000 customers per district.
    Spec,
    /// 1 000 items, 30 customers per district: loads in a blink.
    Small,
}

/// The knobs that size a workload's initial state; each applies to the
/// workloads its doc names and is ignored by the others. Absent knobs take
/// the in-process defaults.
#[derive(Args, Clone, Debug, Default, PartialEq)]
pub struct Knobs {
    /// ycsbt: accounts [default: 10000].
    #[arg(long)]
    pub keys: Option<u64>,
    /// tpcc: warehouses [default: 1].
    #[arg(long)]
    pub warehouses: Option<u32>,
    /// tpcc: how much to load per warehouse [default: spec].
    #[arg(long, value_enum)]
    pub scale: Option<TpccScale>,
    /// movie, travel: users [default: 1000 for movie, 500 for travel].
    #[arg(long)]
    pub users: Option<u64>,
    /// movie: movies [default: 1000].
    #[arg(long)]
    pub movies: Option<u64>,
    /// travel: hotels [default: 80].
    #[arg(long)]
    pub hotels: Option<u64>,
    /// travel: flights [default: 80].
    #[arg(long)]
    pub flights: Option<u64>,
    /// travel: rooms per hotel [default: 200].
    #[arg(long)]
    pub rooms: Option<i64>,
    /// travel: seats per flight [default: 200].
    #[arg(long)]
    pub seats: Option<i64>,
}

/// Defaults of the knobs.
pub const KEYS_DEFAULT: u64 = 10_000;
pub const WAREHOUSES_DEFAULT: u32 = 1;

impl Knobs {
    pub fn ycsbt(&self) -> Result<Ycsbt, String> {
        let keys = self.keys.unwrap_or(KEYS_DEFAULT);
        if keys < 2 || keys > u64::from(u32::MAX) {
            return Err(format!("--keys must be in 2..={}, got {keys}", u32::MAX));
        }
        Ok(Ycsbt {
            keys,
            zipf: None,
            partitions: PARTITIONS,
            api: styx_bench::Api::default(),
            hot_shard: None,
            hot_roots: false,
        })
    }

    pub fn tpcc(&self) -> Result<Tpcc, String> {
        let warehouses = self.warehouses.unwrap_or(WAREHOUSES_DEFAULT);
        if warehouses == 0 {
            return Err("--warehouses must be at least 1".into());
        }
        Ok(Tpcc {
            scale: match self.scale.unwrap_or(TpccScale::Spec) {
                TpccScale::Spec => tpcc::Scale::spec(warehouses),
                TpccScale::Small => tpcc::Scale::small(warehouses),
            },
            mix: tpcc::Mix::default(),
            partitions: PARTITIONS,
            load_seed: 1,
            api: styx_bench::Api::default(),
        })
    }

    pub fn movie(&self) -> Result<Movie, String> {
        let d = movie::Scale::default();
        let scale = movie::Scale {
            users: self.users.unwrap_or(d.users),
            movies: self.movies.unwrap_or(d.movies),
        };
        if scale.users == 0 || scale.movies == 0 {
            return Err("--users and --movies must be at least 1".into());
        }
        Ok(Movie {
            scale,
            partitions: PARTITIONS,
            api: styx_bench::Api::default(),
        })
    }

    pub fn travel(&self) -> Result<Travel, String> {
        let d = travel::Scale::default();
        let scale = travel::Scale {
            hotels: self.hotels.unwrap_or(d.hotels),
            flights: self.flights.unwrap_or(d.flights),
            users: self.users.unwrap_or(d.users),
            rooms_per_hotel: self.rooms.unwrap_or(d.rooms_per_hotel),
            seats_per_flight: self.seats.unwrap_or(d.seats_per_flight),
        };
        if scale.hotels == 0 || scale.flights == 0 || scale.users == 0 {
            return Err("--hotels, --flights and --users must be at least 1".into());
        }
        Ok(Travel {
            scale,
            partitions: PARTITIONS,
            geo_partitions: GEO_PARTITIONS,
            api: styx_bench::Api::default(),
        })
    }

    /// Runs `v` on workload `name` sized by these knobs.
    pub fn visit<V: Visit>(&self, name: Name, v: V) -> Result<V::Out, String> {
        Ok(match name {
            Name::Ycsbt => v.visit(self.ycsbt()?),
            Name::Tpcc => v.visit(self.tpcc()?),
            Name::Movie => v.visit(self.movie()?),
            Name::Travel => v.visit(self.travel()?),
        })
    }
}

/// Code generic over the workload, run by [`Knobs::visit`].
pub trait Visit {
    type Out;
    fn visit<W: Workload>(self, workload: W) -> Self::Out;
}

/// A one-line description of a workload's initial state: its name and its
/// parameters (the preload marker compares these).
pub fn label<W: Workload>(workload: &W) -> String {
    let params: Vec<String> = workload.parameters().iter().map(|(k, v)| format!("{k}={v}")).collect();
    format!("{} {}", workload.name(), params.join(" "))
}

/// The operators of an application and their partition counts: two
/// applications with the same layout place every entity alike.
pub fn layout(app: &App) -> Vec<(String, u32)> {
    app.operators()
        .map(|(_, op)| (op.name().to_string(), op.partitions()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Layout;
    impl Visit for Layout {
        type Out = (String, Vec<(String, u32)>);
        fn visit<W: Workload>(self, w: W) -> Self::Out {
            (w.name().to_string(), layout(&w.app()))
        }
    }

    #[test]
    fn each_workload_has_the_layout_styxd_serves() {
        for name in [Name::Ycsbt, Name::Tpcc, Name::Movie, Name::Travel] {
            let (workload, got) = Knobs::default().visit(name, Layout).unwrap();
            assert_eq!(workload, name.as_str());
            let served = crate::apps::by_name(name.as_str()).unwrap();
            assert_eq!(got, layout(&served), "{name}");
            assert_eq!(Name::parse(name.as_str()), Some(name));
        }
    }
}
