//! Arguments and results by the application's schema: JSON values on one
//! side, the wire encoding (`docs/protocol.md`, section 10) on the other.
//! `styx call` reads the schema a daemon serves (`GET /schema`, or
//! `--schema json` saved to a file) and uses this to take
//! `styx call account 7 transfer 9 25` instead of `u64:9 i64:25`, and to
//! print results as JSON.
//!
//! Values, by wire type:
//! - numbers: JSON numbers (integers checked against their width);
//! - `bool`: `true`/`false`; `String`: a JSON string; `Bytes`: a hex string;
//! - `Vec<T>` and tuples: arrays; `Option<T>`: `null` or the value;
//! - structs: an object by field name (or an array, in field order);
//! - enums: the variant's name as a string when it has no fields, else
//!   `{"Variant": {fields}}` (or `{"Variant": [fields]}`).

use serde_json::{Map, Value};
use std::collections::BTreeMap;
use styx_engine::{Field, TypeDef, Types, Variant, WireType};

/// One function of the schema, as a client needs it.
#[derive(Clone, Debug, PartialEq)]
pub struct FunctionInfo {
    pub name: String,
    /// Whether it runs on a partition (else on an entity).
    pub partition: bool,
    pub args: Vec<(Option<String>, WireType)>,
    pub result: WireType,
    /// The signature as the schema's text prints it.
    pub signature: String,
}

/// What a client reads from a daemon's JSON schema.
#[derive(Clone, Debug, PartialEq)]
pub struct ClientSchema {
    pub app: String,
    /// Operator name → its functions in order.
    pub operators: BTreeMap<String, Vec<FunctionInfo>>,
    pub types: Types,
}

impl ClientSchema {
    /// Parses the JSON of `Schema::to_json`.
    pub fn parse(text: &str) -> Result<ClientSchema, String> {
        let json: Value = serde_json::from_str(text).map_err(|e| format!("schema is not JSON: {e}"))?;
        let bad = |what: &str| format!("schema: {what}");
        let app = json["app"].as_str().ok_or_else(|| bad("no app name"))?.to_string();
        let mut operators = BTreeMap::new();
        for op in json["operators"].as_array().ok_or_else(|| bad("no operators"))? {
            let name = op["name"].as_str().ok_or_else(|| bad("an operator without a name"))?;
            let mut functions = Vec::new();
            for f in op["functions"].as_array().ok_or_else(|| bad("no functions"))? {
                let fname = f["name"].as_str().ok_or_else(|| bad("a function without a name"))?;
                let mut args = Vec::new();
                for a in f["args"].as_array().ok_or_else(|| bad("no args"))? {
                    args.push((a["name"].as_str().map(str::to_string), parse_type(&a["type"])?));
                }
                functions.push(FunctionInfo {
                    name: fname.to_string(),
                    partition: f["kind"] == "partition",
                    args,
                    result: parse_type(&f["result"])?,
                    signature: f["signature"].as_str().unwrap_or_default().to_string(),
                });
            }
            operators.insert(name.to_string(), functions);
        }
        let mut types = Types::new();
        if let Some(defs) = json["types"].as_object() {
            for (name, def) in defs {
                types.insert(name.clone(), parse_def(def)?);
            }
        }
        Ok(ClientSchema { app, operators, types })
    }

    /// Function `function` of `operator`, or an error that lists what exists.
    pub fn function(&self, operator: &str, function: &str) -> Result<&FunctionInfo, String> {
        let Some(functions) = self.operators.get(operator) else {
            let names: Vec<&str> = self.operators.keys().map(String::as_str).collect();
            return Err(format!(
                "{} has no operator {operator}; it has {}",
                self.app,
                names.join(", ")
            ));
        };
        functions.iter().find(|f| f.name == function).ok_or_else(|| {
            let names: Vec<&str> = functions
                .iter()
                .map(|f| f.name.as_str())
                .filter(|n| !n.starts_with("__"))
                .collect();
            format!("{operator} has no function {function}; it has {}", names.join(", "))
        })
    }
}

fn parse_type(v: &Value) -> Result<WireType, String> {
    const NUMBERS: [&str; 10] = ["u8", "u16", "u32", "u64", "i8", "i16", "i32", "i64", "f32", "f64"];
    if let Some(name) = v.as_str() {
        return match name {
            "bool" => Ok(WireType::Bool),
            "String" => Ok(WireType::String),
            "Bytes" => Ok(WireType::Bytes),
            n => NUMBERS
                .iter()
                .find(|x| **x == n)
                .map(|x| WireType::Number(x))
                .ok_or_else(|| format!("schema: unknown type {n}")),
        };
    }
    let object = v.as_object().ok_or_else(|| format!("schema: bad type {v}"))?;
    let (kind, inner) = object.iter().next().ok_or_else(|| format!("schema: bad type {v}"))?;
    Ok(match kind.as_str() {
        "vec" => WireType::Vec(Box::new(parse_type(inner)?)),
        "option" => WireType::Option(Box::new(parse_type(inner)?)),
        "tuple" => WireType::Tuple(
            inner
                .as_array()
                .ok_or_else(|| format!("schema: bad tuple {v}"))?
                .iter()
                .map(parse_type)
                .collect::<Result<_, _>>()?,
        ),
        "named" => WireType::Named(inner.as_str().unwrap_or_default().to_string()),
        "opaque" => WireType::Opaque(inner.as_str().unwrap_or_default().to_string()),
        _ => return Err(format!("schema: unknown type {v}")),
    })
}

fn parse_fields(v: &Value) -> Result<Vec<Field>, String> {
    v.as_array()
        .ok_or_else(|| format!("schema: bad fields {v}"))?
        .iter()
        .map(|f| {
            Ok(Field {
                name: f["name"].as_str().map(str::to_string),
                ty: parse_type(&f["type"])?,
            })
        })
        .collect()
}

fn parse_def(v: &Value) -> Result<TypeDef, String> {
    if let Some(fields) = v.get("struct") {
        return Ok(TypeDef::Struct(parse_fields(fields)?));
    }
    let variants = v
        .get("enum")
        .and_then(Value::as_array)
        .ok_or_else(|| format!("schema: bad type definition {v}"))?;
    Ok(TypeDef::Enum(
        variants
            .iter()
            .map(|x| {
                Ok(Variant {
                    name: x["name"].as_str().unwrap_or_default().to_string(),
                    fields: parse_fields(&x["fields"])?,
                })
            })
            .collect::<Result<_, String>>()?,
    ))
}

/// Encodes `value` as `ty` onto `out`.
pub fn encode(value: &Value, ty: &WireType, types: &Types, out: &mut Vec<u8>) -> Result<(), String> {
    let wrong = || format!("expected {ty}, got {value}");
    match ty {
        WireType::Number(n) => encode_number(value, n, out).ok_or_else(wrong)?,
        WireType::Bool => out.push(u8::from(value.as_bool().ok_or_else(wrong)?)),
        WireType::String => {
            let s = value.as_str().ok_or_else(wrong)?;
            put_len(s.len(), out)?;
            out.extend_from_slice(s.as_bytes());
        }
        WireType::Bytes => {
            let hex = value.as_str().ok_or_else(wrong)?;
            let bytes = parse_hex(hex).map_err(|e| format!("{e} (Bytes are written in hex)"))?;
            put_len(bytes.len(), out)?;
            out.extend_from_slice(&bytes);
        }
        WireType::Vec(item) => {
            let items = value.as_array().ok_or_else(wrong)?;
            put_len(items.len(), out)?;
            for v in items {
                encode(v, item, types, out)?;
            }
        }
        WireType::Option(item) => match value {
            Value::Null => out.push(0),
            v => {
                out.push(1);
                encode(v, item, types, out)?;
            }
        },
        WireType::Tuple(items) => {
            let values = value.as_array().filter(|v| v.len() == items.len()).ok_or_else(wrong)?;
            for (v, t) in values.iter().zip(items) {
                encode(v, t, types, out)?;
            }
        }
        WireType::Named(name) => match types.get(name) {
            Some(TypeDef::Struct(fields)) => {
                encode_fields(value, fields, types, out).map_err(|e| format!("{name}: {e}"))?
            }
            Some(TypeDef::Enum(variants)) => {
                let (variant, fields) = match value {
                    Value::String(s) => (s.as_str(), None),
                    Value::Object(o) if o.len() == 1 => {
                        let (k, v) = o.iter().next().expect("one");
                        (k.as_str(), Some(v))
                    }
                    _ => {
                        return Err(format!(
                            "{name}: expected \"Variant\" or {{\"Variant\": fields}}, got {value}"
                        ));
                    }
                };
                let index = variants.iter().position(|v| v.name == variant).ok_or_else(|| {
                    let names: Vec<&str> = variants.iter().map(|v| v.name.as_str()).collect();
                    format!("{name} has no variant {variant}; it has {}", names.join(", "))
                })?;
                out.push(index as u8);
                let empty = Value::Array(Vec::new());
                encode_fields(fields.unwrap_or(&empty), &variants[index].fields, types, out)
                    .map_err(|e| format!("{name}::{variant}: {e}"))?;
            }
            None => return Err(format!("the schema does not define {name}")),
        },
        WireType::Opaque(name) => {
            return Err(format!(
                "{name} has a hand-written encoding the schema does not describe; pass the whole payload as raw:HEX"
            ));
        }
    }
    Ok(())
}

fn encode_fields(value: &Value, fields: &[Field], types: &Types, out: &mut Vec<u8>) -> Result<(), String> {
    match value {
        Value::Object(o) => {
            for f in fields {
                let name = f
                    .name
                    .as_deref()
                    .ok_or("its fields have no names: write them as an array")?;
                let v = o.get(name).ok_or_else(|| format!("missing field {name}"))?;
                encode(v, &f.ty, types, out).map_err(|e| format!("{name}: {e}"))?;
            }
            if let Some(extra) = o.keys().find(|k| !fields.iter().any(|f| f.name.as_deref() == Some(k))) {
                return Err(format!("no field {extra}"));
            }
            Ok(())
        }
        Value::Array(values) if values.len() == fields.len() => {
            for (v, f) in values.iter().zip(fields) {
                encode(v, &f.ty, types, out)?;
            }
            Ok(())
        }
        _ => Err(format!("expected {} fields, got {value}", fields.len())),
    }
}

fn encode_number(value: &Value, ty: &str, out: &mut Vec<u8>) -> Option<()> {
    macro_rules! int {
        ($t:ty) => {
            out.extend_from_slice(
                &<$t>::try_from(
                    value
                        .as_i64()
                        .map(i128::from)
                        .or(value.as_u64().map(i128::from))?,
                )
                .ok()?
                .to_le_bytes(),
            )
        };
    }
    match ty {
        "u8" => int!(u8),
        "u16" => int!(u16),
        "u32" => int!(u32),
        "u64" => int!(u64),
        "i8" => int!(i8),
        "i16" => int!(i16),
        "i32" => int!(i32),
        "i64" => int!(i64),
        "f32" => out.extend_from_slice(&(value.as_f64()? as f32).to_le_bytes()),
        "f64" => out.extend_from_slice(&value.as_f64()?.to_le_bytes()),
        _ => return None,
    }
    Some(())
}

fn put_len(n: usize, out: &mut Vec<u8>) -> Result<(), String> {
    let n = u32::try_from(n)
        .ok()
        .filter(|n| *n as usize <= styx_engine::PAYLOAD_LEN_MAX)
        .ok_or_else(|| format!("{n} elements or bytes, over the payload limit"))?;
    out.extend_from_slice(&n.to_le_bytes());
    Ok(())
}

pub fn parse_hex(text: &str) -> Result<Vec<u8>, String> {
    let text = text.strip_prefix("0x").unwrap_or(text);
    if !text.len().is_multiple_of(2) {
        return Err(format!("hex `{text}` has an odd number of digits"));
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).map_err(|_| format!("`{text}` is not hex")))
        .collect()
}

/// Decodes one value of type `ty` from the front of `input`.
pub fn decode(input: &mut &[u8], ty: &WireType, types: &Types) -> Result<Value, String> {
    fn take<'a>(input: &mut &'a [u8], n: usize) -> Result<&'a [u8], String> {
        if input.len() < n {
            return Err(format!("{} bytes short", n - input.len()));
        }
        let (head, tail) = input.split_at(n);
        *input = tail;
        Ok(head)
    }
    fn len(input: &mut &[u8]) -> Result<usize, String> {
        let n = u32::from_le_bytes(take(input, 4)?.try_into().expect("4")) as usize;
        if n > styx_engine::PAYLOAD_LEN_MAX {
            return Err(format!("length {n} over the payload limit"));
        }
        Ok(n)
    }
    macro_rules! num {
        ($t:ty) => {{
            let b = take(input, std::mem::size_of::<$t>())?;
            Value::from(<$t>::from_le_bytes(b.try_into().expect("sized")))
        }};
    }
    Ok(match ty {
        WireType::Number(n) => match *n {
            "u8" => num!(u8),
            "u16" => num!(u16),
            "u32" => num!(u32),
            "u64" => num!(u64),
            "i8" => num!(i8),
            "i16" => num!(i16),
            "i32" => num!(i32),
            "i64" => num!(i64),
            "f32" => num!(f32),
            "f64" => num!(f64),
            other => return Err(format!("unknown number type {other}")),
        },
        WireType::Bool => match take(input, 1)?[0] {
            0 => Value::Bool(false),
            1 => Value::Bool(true),
            t => return Err(format!("bool byte {t}")),
        },
        WireType::String => {
            let n = len(input)?;
            Value::String(String::from_utf8(take(input, n)?.to_vec()).map_err(|_| "a String is not UTF-8".to_string())?)
        }
        WireType::Bytes => {
            let n = len(input)?;
            Value::String(take(input, n)?.iter().map(|b| format!("{b:02x}")).collect())
        }
        WireType::Vec(item) => {
            let n = len(input)?;
            let mut items = Vec::with_capacity(n.min(input.len()));
            for _ in 0..n {
                items.push(decode(input, item, types)?);
            }
            Value::Array(items)
        }
        WireType::Option(item) => match take(input, 1)?[0] {
            0 => Value::Null,
            1 => decode(input, item, types)?,
            t => return Err(format!("option tag {t}")),
        },
        WireType::Tuple(items) if items.is_empty() => Value::Null,
        WireType::Tuple(items) => Value::Array(
            items
                .iter()
                .map(|t| decode(input, t, types))
                .collect::<Result<_, _>>()?,
        ),
        WireType::Named(name) => match types.get(name) {
            Some(TypeDef::Struct(fields)) => decode_fields(input, fields, types)?,
            Some(TypeDef::Enum(variants)) => {
                let tag = take(input, 1)?[0];
                let v = variants
                    .get(usize::from(tag))
                    .ok_or_else(|| format!("{name} has no variant {tag}"))?;
                if v.fields.is_empty() {
                    Value::String(v.name.clone())
                } else {
                    let mut o = Map::new();
                    o.insert(v.name.clone(), decode_fields(input, &v.fields, types)?);
                    Value::Object(o)
                }
            }
            None => return Err(format!("the schema does not define {name}")),
        },
        WireType::Opaque(_) => {
            let rest = take(input, input.len())?;
            Value::String(rest.iter().map(|b| format!("{b:02x}")).collect())
        }
    })
}

fn decode_fields(input: &mut &[u8], fields: &[Field], types: &Types) -> Result<Value, String> {
    if fields.iter().all(|f| f.name.is_some()) && !fields.is_empty() {
        let mut o = Map::new();
        for f in fields {
            o.insert(f.name.clone().expect("named"), decode(input, &f.ty, types)?);
        }
        Ok(Value::Object(o))
    } else {
        Ok(Value::Array(
            fields
                .iter()
                .map(|f| decode(input, &f.ty, types))
                .collect::<Result<_, _>>()?,
        ))
    }
}

/// A command-line argument as a JSON value: JSON when it parses, else the
/// text as a string (`ada` rather than `"ada"`).
pub fn arg_value(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_string()))
}

/// The payload of `function` called with `args` (command-line words).
pub fn encode_args(function: &FunctionInfo, args: &[String], types: &Types) -> Result<Vec<u8>, String> {
    if args.len() != function.args.len() {
        return Err(format!(
            "{} takes {} argument{}, got {}: {}",
            function.name,
            function.args.len(),
            if function.args.len() == 1 { "" } else { "s" },
            args.len(),
            function.signature
        ));
    }
    let mut out = Vec::new();
    for (i, (text, (name, ty))) in args.iter().zip(&function.args).enumerate() {
        let label = name.clone().unwrap_or_else(|| format!("argument {}", i + 1));
        encode(&arg_value(text), ty, types, &mut out).map_err(|e| format!("{label}: {e}"))?;
    }
    Ok(out)
}

/// A result payload as JSON; bytes left over are an error.
pub fn decode_result(function: &FunctionInfo, mut bytes: &[u8], types: &Types) -> Result<Value, String> {
    let v = decode(&mut bytes, &function.result, types)?;
    if !bytes.is_empty() {
        return Err(format!("{} bytes left over after the {}", bytes.len(), function.result));
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use styx_engine::{self as styx, Abort, App, Payload};

    #[derive(styx::Encode, styx::Decode, Debug, PartialEq, Clone)]
    struct Line {
        item: u32,
        quantity: u8,
        note: Option<String>,
    }

    #[derive(styx::Encode, styx::Decode, Debug, PartialEq, Clone)]
    enum Reply {
        Placed { id: u64, total: i64 },
        Empty,
        Pair(bool, Vec<u16>),
    }

    fn app() -> Arc<App> {
        let mut app = App::new("shop");
        let order = app.operator("order", 4);
        app.function(order, "place", |_, (lines, tag): (Vec<Line>, String)| async move {
            Ok::<_, Abort>(match lines.len() {
                0 => Reply::Empty,
                1 => Reply::Pair(tag.is_empty(), vec![7, 8]),
                n => Reply::Placed {
                    id: n as u64,
                    total: -5,
                },
            })
        });
        Arc::new(app)
    }

    fn schema() -> ClientSchema {
        ClientSchema::parse(&app().schema().to_json()).expect("parses")
    }

    #[test]
    fn json_arguments_encode_like_the_rust_values() {
        let schema = schema();
        let place = schema.function("order", "place").unwrap();
        let args = [
            r#"[{"item": 5, "quantity": 2, "note": null}, [6, 1, "gift"]]"#.to_string(),
            "rush".to_string(),
        ];
        let bytes = encode_args(place, &args, &schema.types).unwrap();
        let lines = vec![
            Line {
                item: 5,
                quantity: 2,
                note: None,
            },
            Line {
                item: 6,
                quantity: 1,
                note: Some("gift".into()),
            },
        ];
        assert_eq!(bytes, Payload::encode(&(lines, "rush".to_string())).as_bytes());
    }

    #[test]
    fn results_decode_to_json() {
        let schema = schema();
        let place = schema.function("order", "place").unwrap();
        let show = |r: Reply| decode_result(place, Payload::encode(&r).as_bytes(), &schema.types).unwrap();
        assert_eq!(
            show(Reply::Placed { id: 3, total: -5 }),
            serde_json::json!({"Placed": {"id": 3, "total": -5}})
        );
        assert_eq!(show(Reply::Empty), serde_json::json!("Empty"));
        assert_eq!(
            show(Reply::Pair(true, vec![7, 8])),
            serde_json::json!({"Pair": [true, [7, 8]]})
        );
        // And back: what is printed can be passed again.
        let mut out = Vec::new();
        let json = serde_json::json!({"Placed": {"id": 3, "total": -5}});
        encode(&json, &place.result, &schema.types, &mut out).unwrap();
        assert_eq!(out, Payload::encode(&Reply::Placed { id: 3, total: -5 }).as_bytes());
    }

    #[test]
    fn bad_arguments_say_what_was_expected() {
        let schema = schema();
        let place = schema.function("order", "place").unwrap();
        let err = |args: &[&str]| {
            let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
            encode_args(place, &args, &schema.types).unwrap_err()
        };
        assert!(
            err(&["[]"]).contains("place takes 2 arguments, got 1"),
            "{}",
            err(&["[]"])
        );
        let e = err(&[r#"[{"item": 5, "quantity": 300, "note": null}]"#, "x"]);
        assert!(e.contains("quantity: expected u8, got 300"), "{e}");
        let e = err(&[r#"[{"item": 5, "quantity": 1}]"#, "x"]);
        assert!(e.contains("missing field note"), "{e}");
        let e = err(&["7", "x"]);
        assert!(e.contains("expected Vec<Line>"), "{e}");
        assert!(schema.function("order", "plaec").unwrap_err().contains("it has place"));
        assert!(
            schema
                .function("ordr", "place")
                .unwrap_err()
                .contains("no operator ordr")
        );
    }

    #[test]
    fn truncated_results_are_errors() {
        let schema = schema();
        let place = schema.function("order", "place").unwrap();
        let bytes = Payload::encode(&Reply::Placed { id: 3, total: -5 });
        let e = decode_result(place, &bytes.as_bytes()[..5], &schema.types).unwrap_err();
        assert!(e.contains("short"), "{e}");
        let mut long = bytes.as_bytes().to_vec();
        long.push(0);
        assert!(
            decode_result(place, &long, &schema.types)
                .unwrap_err()
                .contains("left over")
        );
    }
}
