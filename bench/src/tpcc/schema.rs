//! TPC-C's tables as entity state: one operator per table, one entity per
//! row, except where rows are always written and read together. Each row
//! type is the table's typed entity (`#[entity(required)]`: a row must
//! exist); a row stored as a bare number or vector has a one-field wrapper
//! that archives to the same bytes.
//!
//! | operator             | key                    | value (entity)                       | TPC-C rows                  |
//! |----------------------|------------------------|--------------------------------------|-----------------------------|
//! | `warehouse`          | `w`                    | [`Warehouse`]                        | WAREHOUSE without W_YTD     |
//! | `warehouse_ytd`      | `w`                    | `i64` ([`WarehouseYtd`])             | WAREHOUSE.W_YTD             |
//! | `district`           | `(w, d)`               | [`District`]                         | DISTRICT without D_NEXT_O_ID|
//! | `district_next_o_id` | `(w, d)`               | `u32` ([`DistrictNextOId`])          | DISTRICT.D_NEXT_O_ID        |
//! | `customer`           | `(w, d, c)`            | [`Customer`]                         | CUSTOMER                    |
//! | `customer_by_name`   | `(w, d, last)`         | `Vec<u32>` ([`CustomerByName`])      | index on C_LAST, by C_FIRST |
//! | `history`            | `(w, d, origin, n)`    | [`History`]                          | HISTORY                     |
//! | `item`               | `i`                    | [`Item`]                             | ITEM                        |
//! | `stock`              | `(w, i)`               | [`Stock`]                            | STOCK                       |
//! | `order`              | `(w, d, o)`            | [`Order`]                            | ORDER                       |
//! | `order_line`         | `(w, d, o)`            | `Vec<OrderLine>` ([`OrderLines`])    | the ORDER-LINE rows of o    |
//! | `new_order`          | `(w, d, o)`            | `u32` NO_O_ID ([`NewOrderRow`])      | NEW-ORDER                   |
//!
//! Why this shape:
//!
//! - **D_NEXT_O_ID is split from the rest of DISTRICT** (vertical
//!   partitioning, which TPC-C 1.6 allows). NewOrder writes D_NEXT_O_ID and
//!   reads D_TAX; Payment writes D_YTD. In one entity every NewOrder would
//!   write what a concurrent Payment of its district reads and writes, and
//!   the epoch protocol would abort one of them. Split, a NewOrder only
//!   *reads* what a Payment writes (warehouse, district, customer), which
//!   deterministic reordering commits without re-execution.
//! - **W_YTD is split from the rest of WAREHOUSE** and Payment *adds* to
//!   it (`Ctx::add`) instead of reading and writing it. Every Payment of a
//!   warehouse writes W_YTD, and a warehouse has ten districts' terminals:
//!   as a read and a write, all Payments of a warehouse in one epoch but
//!   the first conflicted and ran again (42% of all transactions at W = 10,
//!   2 shards). Adds commute, so they do not conflict with each other, and
//!   NewOrder's read of W_TAX no longer meets a write at all.
//! - **The ORDER-LINE rows of one order share one entity**: NewOrder writes
//!   them together and every other transaction (Order-Status, Delivery)
//!   reads them together; ten entities would cost ten more messages per
//!   NewOrder for nothing. ORDER stays a separate entity, so consistency
//!   condition 4 compares O_OL_CNT with what a different write left behind.
//! - **HISTORY has no primary key in TPC-C**; ours is the paying district
//!   plus the transaction id (unique, and the same when a transaction is
//!   re-executed or replayed), or the customer id for loaded rows.
//! - **Money is integer cents, rates are units of 1/10 000** (TPC-C gives
//!   them four decimals): sums are exact, so the consistency conditions are
//!   equalities, not tolerances.
//!
//! Every per-warehouse key starts with the warehouse id, big-endian, so keys
//! sort by warehouse; placement, however, is by a hash of the whole key (see
//! the module documentation of [`crate::tpcc`]).

use rkyv::{Archive, Deserialize, Serialize};
use styx_engine::{self as styx, App, Key, OpId};

/// Districts per warehouse (TPC-C 1.2: fixed at ten).
pub const DISTRICTS: u8 = 10;
/// Order lines per order are 5..=15 (TPC-C 2.4.1.3).
pub const ORDER_LINES_MIN: usize = 5;
pub const ORDER_LINES_MAX: usize = 15;
/// C_DATA is cut to this many characters when Payment prepends to it.
pub const CUSTOMER_DATA_LEN_MAX: usize = 500;
/// One hundred percent in the units of taxes and discounts.
pub const RATE_ONE: i64 = 10_000;

/// Amounts of money, in cents.
pub type Cents = i64;

/// A CHAR(N) or VARCHAR(N) column: at most `N` bytes of text (TPC-C's
/// strings are ASCII), stored inline at a fixed width. A `String` column
/// was validated as UTF-8 on every read in place and allocated on every
/// decode; these archive to plain bytes, so a row of them is checked by
/// its length fields alone and decodes without allocating.
#[derive(Archive, Serialize, Deserialize, Clone, Copy, PartialEq, Eq)]
pub struct Text<const N: usize> {
    len: u16,
    bytes: [u8; N],
}

impl<const N: usize> Text<N> {
    /// The first `N` bytes of `bytes` (the rest is cut off).
    pub fn new(bytes: &[u8]) -> Text<N> {
        let len = bytes.len().min(N);
        let mut text = Text {
            len: len as u16,
            bytes: [0; N],
        };
        text.bytes[..len].copy_from_slice(&bytes[..len]);
        text
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len).min(N)]
    }

    /// Whether `needle` occurs in the text (I_DATA, S_DATA: "ORIGINAL").
    pub fn contains(&self, needle: &[u8]) -> bool {
        contains(self.as_bytes(), needle)
    }
}

impl<const N: usize> ArchivedText<N> {
    pub fn as_bytes(&self) -> &[u8] {
        // A stored length over N is cut to N: the bytes stay in the row.
        &self.bytes[..usize::from(self.len.to_native()).min(N)]
    }

    pub fn contains(&self, needle: &[u8]) -> bool {
        contains(self.as_bytes(), needle)
    }

    pub fn to_text(&self) -> Text<N> {
        Text::new(self.as_bytes())
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || haystack.windows(needle.len()).any(|w| w == needle)
}

impl<const N: usize> From<&str> for Text<N> {
    fn from(s: &str) -> Text<N> {
        Text::new(s.as_bytes())
    }
}

impl<const N: usize> From<String> for Text<N> {
    fn from(s: String) -> Text<N> {
        Text::new(s.as_bytes())
    }
}

impl<const N: usize> std::fmt::Display for Text<N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&String::from_utf8_lossy(self.as_bytes()))
    }
}

impl<const N: usize> std::fmt::Debug for Text<N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(self.as_bytes()))
    }
}

impl<const N: usize> PartialEq<str> for Text<N> {
    fn eq(&self, other: &str) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

/// In arguments and results a text travels as bytes (a `u32` length,
/// then the bytes); one longer than `N` is refused, not cut.
impl<const N: usize> styx::Encode for Text<N> {
    fn encode(&self, w: &mut styx::Writer) {
        styx::Encode::encode(&(self.as_bytes().len() as u32), w);
        w.put(self.as_bytes());
    }

    fn wire_type(_: &mut styx::Types) -> styx::WireType {
        styx::WireType::Bytes
    }
}

impl<const N: usize> styx::Decode for Text<N> {
    fn decode(input: &mut &[u8]) -> Result<Text<N>, styx::DecodeError> {
        let n = <u32 as styx::Decode>::decode(input)? as usize;
        if n > N {
            return Err(styx::DecodeError::Invalid(format!(
                "a text of {n} bytes where at most {N} fit"
            )));
        }
        if input.len() < n {
            return Err(styx::DecodeError::Short {
                expected: n - input.len(),
            });
        }
        let (bytes, rest) = input.split_at(n);
        *input = rest;
        Ok(Text::new(bytes))
    }

    fn wire_type(_: &mut styx::Types) -> styx::WireType {
        styx::WireType::Bytes
    }
}

/// Where a HISTORY row comes from: the initial load or a Payment.
pub const HISTORY_LOADED: u8 = 0;
pub const HISTORY_PAYMENT: u8 = 1;

pub const WAREHOUSE: &str = "warehouse";
pub const DISTRICT: &str = "district";
pub const DISTRICT_NEXT_O_ID: &str = "district_next_o_id";
pub const CUSTOMER: &str = "customer";
pub const CUSTOMER_BY_NAME: &str = "customer_by_name";
pub const HISTORY: &str = "history";
pub const ITEM: &str = "item";
pub const STOCK: &str = "stock";
pub const ORDER: &str = "order";
pub const ORDER_LINE: &str = "order_line";
pub const NEW_ORDER: &str = "new_order";
pub const WAREHOUSE_YTD: &str = "warehouse_ytd";
/// Every table's name.
pub const TABLES: [&str; 12] = [
    WAREHOUSE,
    DISTRICT,
    DISTRICT_NEXT_O_ID,
    CUSTOMER,
    CUSTOMER_BY_NAME,
    HISTORY,
    ITEM,
    STOCK,
    ORDER,
    ORDER_LINE,
    NEW_ORDER,
    WAREHOUSE_YTD,
];

/// The operator of every table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tables {
    pub warehouse: OpId,
    pub district: OpId,
    pub district_next_o_id: OpId,
    pub customer: OpId,
    pub customer_by_name: OpId,
    pub history: OpId,
    pub item: OpId,
    pub stock: OpId,
    pub order: OpId,
    pub order_line: OpId,
    pub new_order: OpId,
    pub warehouse_ytd: OpId,
}

impl Tables {
    /// Declares every table on `app`, each over `partitions` partitions.
    pub fn declare(app: &mut App, partitions: u32) -> Tables {
        Tables {
            warehouse: app.operator(WAREHOUSE, partitions),
            district: app.operator(DISTRICT, partitions),
            district_next_o_id: app.operator(DISTRICT_NEXT_O_ID, partitions),
            customer: app.operator(CUSTOMER, partitions),
            customer_by_name: app.operator(CUSTOMER_BY_NAME, partitions),
            history: app.operator(HISTORY, partitions),
            item: app.operator(ITEM, partitions),
            stock: app.operator(STOCK, partitions),
            order: app.operator(ORDER, partitions),
            order_line: app.operator(ORDER_LINE, partitions),
            new_order: app.operator(NEW_ORDER, partitions),
            warehouse_ytd: app.operator(WAREHOUSE_YTD, partitions),
        }
    }

    /// The tables of an application built by [`crate::tpcc::install`].
    ///
    /// # Panics
    /// If `app` lacks one of them.
    pub fn of(app: &App) -> Tables {
        let op = |name| {
            app.op_id(name)
                .unwrap_or_else(|| panic!("{} has no operator {name}", app.name()))
        };
        Tables {
            warehouse: op(WAREHOUSE),
            district: op(DISTRICT),
            district_next_o_id: op(DISTRICT_NEXT_O_ID),
            customer: op(CUSTOMER),
            customer_by_name: op(CUSTOMER_BY_NAME),
            history: op(HISTORY),
            item: op(ITEM),
            stock: op(STOCK),
            order: op(ORDER),
            order_line: op(ORDER_LINE),
            new_order: op(NEW_ORDER),
            warehouse_ytd: op(WAREHOUSE_YTD),
        }
    }
}

#[styx::entity(name = "warehouse", required)]
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Warehouse {
    pub name: Text<10>,
    pub street_1: Text<20>,
    pub street_2: Text<20>,
    pub city: Text<20>,
    pub state: Text<2>,
    pub zip: Text<9>,
    /// W_TAX in 1/10 000.
    pub tax: u32,
}

/// WAREHOUSE.W_YTD, split from the rest of the row; stored as the bare
/// `i64`, which Payment adds to.
#[styx::entity(name = "warehouse_ytd", required)]
#[derive(Archive, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub struct WarehouseYtd {
    pub ytd: Cents,
}

/// A DISTRICT row without D_NEXT_O_ID (which is [`DistrictNextOId`]).
#[styx::entity(name = "district", required)]
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct District {
    pub name: Text<10>,
    pub street_1: Text<20>,
    pub street_2: Text<20>,
    pub city: Text<20>,
    pub state: Text<2>,
    pub zip: Text<9>,
    /// D_TAX in 1/10 000.
    pub tax: u32,
    pub ytd: Cents,
}

#[styx::entity(name = "customer", required)]
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Customer {
    pub first: Text<16>,
    pub middle: Text<2>,
    pub last: Text<16>,
    pub street_1: Text<20>,
    pub street_2: Text<20>,
    pub city: Text<20>,
    pub state: Text<2>,
    pub zip: Text<9>,
    pub phone: Text<16>,
    pub since_us: u64,
    /// "GC" (good) or "BC" (bad credit).
    pub credit: Text<2>,
    pub credit_lim: Cents,
    /// C_DISCOUNT in 1/10 000.
    pub discount: u32,
    pub balance: Cents,
    pub ytd_payment: Cents,
    pub payment_cnt: u32,
    pub delivery_cnt: u32,
    pub data: Text<CUSTOMER_DATA_LEN_MAX>,
}

#[styx::entity(name = "history", required)]
#[derive(Archive, Serialize, Deserialize, styx::Encode, styx::Decode, Clone, Debug, PartialEq, Eq)]
pub struct History {
    pub c_id: u32,
    pub c_d_id: u8,
    pub c_w_id: u32,
    pub d_id: u8,
    pub w_id: u32,
    pub date_us: u64,
    pub amount: Cents,
    pub data: Text<24>,
}

#[styx::entity(name = "item", required)]
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Item {
    pub im_id: u32,
    pub name: Text<24>,
    pub price: Cents,
    pub data: Text<50>,
}

/// S_DIST_xx: CHAR(24).
pub type DistInfo = [u8; 24];

#[styx::entity(name = "stock", required)]
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Stock {
    pub quantity: i32,
    /// S_DIST_01 ..= S_DIST_10: CHAR(24), fixed width, so a read neither
    /// validates nor allocates ten strings.
    pub dist: [DistInfo; DISTRICTS as usize],
    pub ytd: u32,
    pub order_cnt: u32,
    pub remote_cnt: u32,
    pub data: Text<50>,
}

#[styx::entity(name = "order", required)]
#[derive(Archive, Serialize, Deserialize, styx::Encode, styx::Decode, Clone, Debug, PartialEq, Eq)]
pub struct Order {
    pub c_id: u32,
    pub entry_d_us: u64,
    pub carrier_id: Option<u8>,
    pub ol_cnt: u8,
    pub all_local: bool,
}

#[derive(Archive, Serialize, Deserialize, styx::Encode, styx::Decode, Clone, Debug, PartialEq, Eq)]
pub struct OrderLine {
    /// OL_NUMBER, 1-based.
    pub number: u8,
    pub i_id: u32,
    pub supply_w_id: u32,
    pub delivery_d_us: Option<u64>,
    pub quantity: u8,
    pub amount: Cents,
    pub dist_info: Text<24>,
}

/// DISTRICT.D_NEXT_O_ID, split from the rest of the row; stored as the
/// bare `u32` (a struct of one number is).
#[styx::entity(name = "district_next_o_id", required)]
#[derive(Archive, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub struct DistrictNextOId {
    pub next_o_id: u32,
}

/// The index on C_LAST: a district's customers of one last name, sorted by
/// C_FIRST. Archives to the bytes of the bare `Vec<u32>` (pinned by a test).
#[styx::entity(name = "customer_by_name", required)]
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct CustomerByName {
    pub ids: Vec<u32>,
}

/// The ORDER-LINE rows of one order. Archives to the bytes of the bare
/// `Vec<OrderLine>` (pinned by a test), which is what is stored.
#[styx::entity(name = "order_line", required)]
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct OrderLines {
    pub lines: Vec<OrderLine>,
}

/// A NEW-ORDER row: NO_O_ID, stored as the bare `u32`.
#[styx::entity(name = "new_order", required)]
#[derive(Archive, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub struct NewOrderRow {
    pub o_id: u32,
}

// ---------------------------------------------------------------------------
// Keys. Integers are big-endian, so the parsers below read them back.

pub fn warehouse_key(w: u32) -> Key {
    Key::from(w)
}

/// The key of a district, and of its D_NEXT_O_ID.
pub fn district_key(w: u32, d: u8) -> Key {
    Key::from((w, d))
}

pub fn customer_key(w: u32, d: u8, c: u32) -> Key {
    Key::from((w, d, c))
}

pub fn customer_name_key(w: u32, d: u8, last: &str) -> Key {
    Key::from((w, d, last))
}

pub fn history_key(w: u32, d: u8, origin: u8, n: u64) -> Key {
    Key::from((w, d, origin, n))
}

pub fn item_key(i: u32) -> Key {
    Key::from(i)
}

pub fn stock_key(w: u32, i: u32) -> Key {
    Key::from((w, i))
}

/// The key of an order, of its order lines and of its NEW-ORDER row.
pub fn order_key(w: u32, d: u8, o: u32) -> Key {
    Key::from((w, d, o))
}

fn be_u32(b: &[u8]) -> u32 {
    u32::from_be_bytes(b[..4].try_into().expect("four bytes"))
}

/// `w` of a warehouse key.
pub fn parse_warehouse(key: &Key) -> Option<u32> {
    let b = key.as_bytes();
    (b.len() == 4).then(|| be_u32(b))
}

/// `(w, d)` of a district key.
pub fn parse_district(key: &Key) -> Option<(u32, u8)> {
    let b = key.as_bytes();
    (b.len() == 5).then(|| (be_u32(b), b[4]))
}

/// `(w, d, x)` of a customer or order key.
pub fn parse_district_u32(key: &Key) -> Option<(u32, u8, u32)> {
    let b = key.as_bytes();
    (b.len() == 9).then(|| (be_u32(b), b[4], be_u32(&b[5..])))
}

/// `(w, d, last)` of a customer-by-name key.
pub fn parse_customer_name(key: &Key) -> Option<(u32, u8, &str)> {
    let b = key.as_bytes();
    if b.len() < 5 {
        return None;
    }
    Some((be_u32(b), b[4], std::str::from_utf8(&b[5..]).ok()?))
}

/// `(w, d, origin, n)` of a history key.
pub fn parse_history(key: &Key) -> Option<(u32, u8, u8, u64)> {
    let b = key.as_bytes();
    (b.len() == 14).then(|| (be_u32(b), b[4], b[5], u64::from_be_bytes(b[6..].try_into().expect("8"))))
}

/// `(w, i)` of a stock key.
pub fn parse_stock(key: &Key) -> Option<(u32, u32)> {
    let b = key.as_bytes();
    (b.len() == 8).then(|| (be_u32(b), be_u32(&b[4..])))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_parse_back() {
        assert_eq!(parse_warehouse(&warehouse_key(7)), Some(7));
        assert_eq!(parse_district(&district_key(7, 3)), Some((7, 3)));
        assert_eq!(parse_district_u32(&customer_key(7, 3, 2999)), Some((7, 3, 2999)));
        assert_eq!(parse_district_u32(&order_key(1, 10, 3001)), Some((1, 10, 3001)));
        assert_eq!(
            parse_customer_name(&customer_name_key(2, 1, "BARBARBAR")),
            Some((2, 1, "BARBARBAR"))
        );
        assert_eq!(
            parse_history(&history_key(2, 9, HISTORY_PAYMENT, u64::MAX - 1)),
            Some((2, 9, HISTORY_PAYMENT, u64::MAX - 1))
        );
        assert_eq!(parse_stock(&stock_key(4, 100_000)), Some((4, 100_000)));
    }

    /// The typed entities name the operators the closures declare, and
    /// their wrappers store the bytes of the bare values the loader writes.
    #[test]
    fn entities_are_the_tables_and_wrappers_archive_like_their_field() {
        use styx_engine::{Entity, Value};
        let names = [
            Warehouse::NAME,
            District::NAME,
            DistrictNextOId::NAME,
            Customer::NAME,
            CustomerByName::NAME,
            History::NAME,
            Item::NAME,
            Stock::NAME,
            Order::NAME,
            OrderLines::NAME,
            NewOrderRow::NAME,
            WarehouseYtd::NAME,
        ];
        assert_eq!(names, TABLES);
        let archive = |v: &dyn Fn(&mut styx_engine::Scratch) -> Value| v(&mut Default::default()).to_vec();
        for ids in [vec![], vec![7u32], vec![3, 1, 2999]] {
            let bare = archive(&|s| Value::encode(&ids, s).unwrap());
            let wrapped = archive(&|s| Value::encode(&CustomerByName { ids: ids.clone() }, s).unwrap());
            assert_eq!(bare, wrapped);
        }
        let line = |n: u8| OrderLine {
            number: n,
            i_id: 77 + u32::from(n),
            supply_w_id: 2,
            delivery_d_us: n.is_multiple_of(2).then_some(9),
            quantity: 9,
            amount: 12_345,
            dist_info: "x".repeat(24).into(),
        };
        for lines in [vec![], vec![line(1)], (1..=15).map(line).collect()] {
            let bare = archive(&|s| Value::encode(&lines, s).unwrap());
            let wrapped = archive(&|s| Value::encode(&OrderLines { lines: lines.clone() }, s).unwrap());
            assert_eq!(bare, wrapped);
        }
        let bare = archive(&|s| Value::encode(&3001u32, s).unwrap());
        assert_eq!(
            bare,
            archive(&|s| Value::encode(&NewOrderRow { o_id: 3001 }, s).unwrap())
        );
        assert_eq!(
            bare,
            archive(&|s| Value::encode(&DistrictNextOId { next_o_id: 3001 }, s).unwrap())
        );
        // What `Ctx::add` needs: the bytes of an i64.
        assert_eq!(
            archive(&|s| Value::encode(&-3_000_000i64, s).unwrap()),
            archive(&|s| Value::encode(&WarehouseYtd { ytd: -3_000_000 }, s).unwrap())
        );
    }

    #[test]
    fn rows_roundtrip_through_the_argument_codec() {
        let line = OrderLine {
            number: 3,
            i_id: 77,
            supply_w_id: 2,
            delivery_d_us: None,
            quantity: 9,
            amount: 12_345,
            dist_info: "x".repeat(24).into(),
        };
        let p = styx_engine::Payload::encode(&vec![line.clone(), line.clone()]);
        assert_eq!(p.decode::<Vec<OrderLine>>().unwrap(), vec![line.clone(), line]);
    }

    #[test]
    fn text_columns_keep_at_most_their_width() {
        let t = Text::<8>::from("ORIGINAL and more");
        assert_eq!(t.as_bytes(), b"ORIGINAL");
        assert!(t.contains(b"ORIGINAL") && t.contains(b"") && !t.contains(b"more"));
        assert_eq!(Text::<8>::from("GC").as_bytes(), b"GC");
        assert!(Text::<2>::from("BC") == *"BC");
        assert_eq!(Text::<16>::from("BARBARBAR").to_string(), "BARBARBAR");

        // Stored in a row and read in place, without decoding the row.
        let mut scratch = styx_engine::Scratch::default();
        let item = Item {
            im_id: 3,
            name: "a name".into(),
            price: 100,
            data: "xxORIGINALyy".into(),
        };
        let value = styx_engine::Value::encode(&item, &mut scratch).unwrap();
        let read = value
            .read::<Item, _>(|i| (i.name.to_text(), i.data.contains(b"ORIGINAL")))
            .unwrap();
        assert_eq!(read, ("a name".into(), true));
        assert_eq!(value.decode::<Item>().unwrap(), item);
    }

    /// As an argument or result a text is a length and its bytes (a
    /// string's encoding); one longer than the type's width is refused.
    #[test]
    fn text_arguments_are_bytes_and_longer_ones_are_refused() {
        let t = Text::<24>::from("abcdefghijklmnopqrstuvwx");
        let p = styx_engine::Payload::encode(&t);
        assert_eq!(
            p.as_bytes(),
            styx_engine::Payload::encode("abcdefghijklmnopqrstuvwx").as_bytes()
        );
        assert_eq!(p.decode::<Text<24>>().unwrap(), t);
        assert!(matches!(
            p.decode::<Text<10>>(),
            Err(styx_engine::DecodeError::Invalid(_))
        ));
        let short = styx_engine::Payload::from_bytes(&p.as_bytes()[..10]);
        assert!(matches!(
            short.decode::<Text<24>>(),
            Err(styx_engine::DecodeError::Short { .. })
        ));
    }
}
