//! Extensible wire enums: an unknown value is kept verbatim and re-encoded
//! byte for byte (RFC `2026-12-02-additive-wire-enums`).
//!
//! An extensible enum (declared with the crate-private `wire_enum!`
//! macro, which `keel-eventlog` uses too) has its known values and one
//! `Unknown(UnknownValue<Self>)` variant. Decoding a known name always gives
//! the known variant; any other word obeying the value grammar (rule
//! `wire_value.syntax`: `[a-z][a-z0-9_]*`, 1 to 64 bytes, the grammar of an
//! event kind segment) gives `Unknown`, which encodes back to the same
//! word. Anything else is refused with a [`WireValueError`] naming the rule.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::marker::PhantomData;
use std::sync::Arc;

/// The longest unknown value, in bytes.
pub const UNKNOWN_VALUE_MAX_BYTES: usize = 64;

/// An enum whose wire values are extensible (implemented by `wire_enum!`).
pub trait WireEnum: Sized + Clone + 'static {
    /// What the value is, for error messages (e.g. `"finish reason"`).
    const WHAT: &'static str;
    /// The known value named `wire`, if any.
    fn known(wire: &str) -> Option<Self>;
    /// Whether this is a known value (not the `Unknown` variant).
    fn is_known(&self) -> bool;
}

/// A wire value of the enum `E` that this version does not know: a word
/// obeying the value grammar that is not one of `E`'s known names, so one
/// value never has two representations. Shared, so cloning is cheap.
pub struct UnknownValue<E> {
    word: Arc<str>,
    of: PhantomData<fn() -> E>,
}

impl<E: WireEnum> UnknownValue<E> {
    /// Validates `word`: rule `wire_value.length` (1 to 64 bytes), rule
    /// `wire_value.syntax` (`[a-z][a-z0-9_]*`) and rule
    /// `wire_value.unknown_only` (not a known name of `E`: use the known
    /// variant).
    pub fn new(word: &str) -> Result<UnknownValue<E>, WireValueError> {
        let what = E::WHAT;
        let len = word.len();
        if len == 0 {
            return Err(WireValueError::Empty { what });
        }
        if len > UNKNOWN_VALUE_MAX_BYTES {
            return Err(WireValueError::TooLong { what, len });
        }
        let bad = word.bytes().enumerate().find(|&(i, b)| {
            !(b.is_ascii_lowercase() || (i > 0 && (b.is_ascii_digit() || b == b'_')))
        });
        if let Some((offset, _)) = bad {
            return Err(WireValueError::Syntax { what, offset });
        }
        if E::known(word).is_some() {
            return Err(WireValueError::Known { what });
        }
        Ok(UnknownValue {
            word: Arc::from(word),
            of: PhantomData,
        })
    }
}

impl<E> UnknownValue<E> {
    /// The word, exactly as it was on the wire.
    pub fn as_str(&self) -> &str {
        &self.word
    }
}

impl<E> Clone for UnknownValue<E> {
    fn clone(&self) -> Self {
        UnknownValue {
            word: Arc::clone(&self.word),
            of: PhantomData,
        }
    }
}

impl<E> PartialEq for UnknownValue<E> {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl<E> Eq for UnknownValue<E> {}

impl<E> Hash for UnknownValue<E> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl<E> fmt::Debug for UnknownValue<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("UnknownValue").field(&self.as_str()).finish()
    }
}

impl<E> fmt::Display for UnknownValue<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a wire value of an extensible enum is refused. Messages name the
/// rule and the size or byte offset, never the value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WireValueError {
    /// An empty string.
    #[error("{what} is empty (rule wire_value.length: 1..=64 bytes)")]
    Empty {
        /// What the value is, e.g. `finish reason`.
        what: &'static str,
    },
    /// A string over [`UNKNOWN_VALUE_MAX_BYTES`].
    #[error("{what} is {len} bytes (rule wire_value.length: 1..=64 bytes)")]
    TooLong {
        /// What the value is.
        what: &'static str,
        /// Its length in bytes.
        len: usize,
    },
    /// A byte outside the grammar.
    #[error(
        "{what} has a disallowed byte at offset {offset} (rule wire_value.syntax: [a-z][a-z0-9_]*)"
    )]
    Syntax {
        /// What the value is.
        what: &'static str,
        /// The offset of the first disallowed byte.
        offset: usize,
    },
    /// A known name offered as an unknown value.
    #[error("{what} is a known value, not an unknown one (rule wire_value.unknown_only)")]
    Known {
        /// What the value is.
        what: &'static str,
    },
}

impl WireValueError {
    /// The rule this error names: `wire_value.length`, `wire_value.syntax`
    /// or `wire_value.unknown_only`.
    pub fn rule(&self) -> &'static str {
        match self {
            WireValueError::Empty { .. } | WireValueError::TooLong { .. } => "wire_value.length",
            WireValueError::Syntax { .. } => "wire_value.syntax",
            WireValueError::Known { .. } => "wire_value.unknown_only",
        }
    }
}

/// Decodes `E` from a wire string: the known value it names, else an
/// unknown one. Used by `wire_enum!`.
pub fn from_wire<E: WireEnum>(
    wire: &str,
    unknown: fn(UnknownValue<E>) -> E,
) -> Result<E, WireValueError> {
    match E::known(wire) {
        Some(known) => Ok(known),
        None => UnknownValue::new(wire).map(unknown),
    }
}

struct Visit<E>(fn(&str) -> Result<E, WireValueError>);

impl<E: WireEnum> serde::de::Visitor<'_> for Visit<E> {
    type Value = E;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "a {} (rule wire_value.syntax: a string [a-z][a-z0-9_]*, 1..=64 bytes)",
            E::WHAT
        )
    }

    fn visit_str<Er: serde::de::Error>(self, v: &str) -> Result<E, Er> {
        (self.0)(v).map_err(Er::custom)
    }
}

/// Deserializes `E` from a string through `from_wire`; anything but a
/// string is refused naming rule `wire_value.syntax`. Used by
/// `wire_enum!`.
pub fn deserialize<'de, E: WireEnum, D: serde::Deserializer<'de>>(
    d: D,
    from_wire: fn(&str) -> Result<E, WireValueError>,
) -> Result<E, D::Error> {
    d.deserialize_str(Visit(from_wire))
}

/// Declares an extensible wire enum: the known values with their wire
/// names, an `Unknown(UnknownValue<Self>)` variant, `#[non_exhaustive]`,
/// `Clone`, `as_str`, `from_wire`, `is_known`, `KNOWN`, `Display` and the
/// string serde. Not a stable API: it exists for the keel crates.
#[doc(hidden)]
#[macro_export]
macro_rules! wire_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident ($what:literal) {
            $( $(#[$vmeta:meta])* $variant:ident => $wire:literal, )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        $vis enum $name {
            $( $(#[$vmeta])* $variant, )+
            /// A value this version does not know, kept verbatim: it
            /// re-encodes byte for byte. Only decoding makes one; a known
            /// name never becomes `Unknown`.
            Unknown($crate::UnknownValue<$name>),
        }

        impl $name {
            /// Every known value, in declaration order.
            pub const KNOWN: &'static [$name] = &[$($name::$variant),+];

            /// The wire name: a known value's, or an unknown value verbatim.
            pub fn as_str(&self) -> &str {
                match self {
                    $( $name::$variant => $wire, )+
                    $name::Unknown(v) => v.as_str(),
                }
            }

            /// Decodes a wire name: a known name gives its variant, any other
            /// word of the value grammar gives `Unknown`; anything else is
            /// a [`WireValueError`]($crate::WireValueError) naming the rule.
            pub fn from_wire(wire: &str) -> Result<$name, $crate::WireValueError> {
                $crate::wire_value::from_wire(wire, $name::Unknown)
            }

            /// Whether this is a value this version knows.
            pub fn is_known(&self) -> bool {
                !matches!(self, $name::Unknown(_))
            }
        }

        impl $crate::WireEnum for $name {
            const WHAT: &'static str = $what;
            fn known(wire: &str) -> Option<$name> {
                match wire {
                    $( $wire => Some($name::$variant), )+
                    _ => None,
                }
            }
            fn is_known(&self) -> bool {
                $name::is_known(self)
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl ::serde::Serialize for $name {
            fn serialize<S: ::serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> ::serde::Deserialize<'de> for $name {
            fn deserialize<D: ::serde::Deserializer<'de>>(d: D) -> Result<$name, D::Error> {
                $crate::wire_value::deserialize(d, $name::from_wire)
            }
        }
    };
}

#[cfg(test)]
mod tests {
    crate::wire_enum! {
        /// A test enum.
        pub enum Colour ("colour") {
            /// Red.
            Red => "red",
            /// Light blue.
            LightBlue => "light_blue",
        }
    }

    #[test]
    fn known_names_decode_known_and_other_words_unknown() {
        assert_eq!(Colour::from_wire("light_blue"), Ok(Colour::LightBlue));
        let green = Colour::from_wire("green2_x");
        assert!(matches!(green, Ok(Colour::Unknown(v)) if v.as_str() == "green2_x"));
        assert_eq!(Colour::KNOWN, &[Colour::Red, Colour::LightBlue]);
    }

    #[test]
    fn the_grammar_is_enforced_with_its_rule() {
        let max = "a".repeat(64);
        assert!(Colour::from_wire(&max).is_ok());
        for (word, rule) in [
            ("", "wire_value.length"),
            (&*"a".repeat(65), "wire_value.length"),
            ("Green", "wire_value.syntax"),
            ("_green", "wire_value.syntax"),
            ("9lives", "wire_value.syntax"),
            ("gr-een", "wire_value.syntax"),
            ("grün", "wire_value.syntax"),
        ] {
            let e = Colour::from_wire(word).err();
            assert_eq!(
                e.as_ref().map(super::WireValueError::rule),
                Some(rule),
                "{word:?}"
            );
        }
        let known = super::UnknownValue::<Colour>::new("red").err();
        assert_eq!(known.map(|e| e.rule()), Some("wire_value.unknown_only"));
    }

    #[test]
    fn refusals_name_the_rule_not_the_value() {
        let e = serde_json::from_str::<Colour>(r#""Secret_Word""#).err();
        let msg = e.map(|e| e.to_string()).unwrap_or_default();
        assert!(
            msg.contains("rule wire_value.syntax") && !msg.contains("Secret"),
            "{msg}"
        );
        let e = serde_json::from_str::<Colour>("7").err();
        let msg = e.map(|e| e.to_string()).unwrap_or_default();
        assert!(msg.contains("rule wire_value.syntax"), "{msg}");
    }
}
