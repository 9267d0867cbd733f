//! The trait impls every validated string newtype shares, so each type
//! states only its rule (its `parse`).

/// Implements `Debug`, `Display`, `AsRef<str>`, `FromStr`, `Serialize` and
/// `Deserialize` for `$name`, a newtype over `Arc<str>` whose
/// `parse(&str) -> Result<$name, $error>` holds its rule: deserializing
/// goes through `parse`, so serde cannot build a value `parse` refuses.
/// For the crates above keel-message (`keel_eventlog::ChatId`); not a
/// stable interface.
#[doc(hidden)]
#[macro_export]
macro_rules! string_newtype_impls {
    ($name:ident, $error:ty) => {
        impl ::std::fmt::Debug for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                write!(f, "{}({:?})", stringify!($name), &*self.0)
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl ::std::convert::AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl ::std::str::FromStr for $name {
            type Err = $error;
            fn from_str(text: &str) -> ::std::result::Result<$name, $error> {
                $name::parse(text)
            }
        }

        impl $crate::__serde::Serialize for $name {
            fn serialize<S: $crate::__serde::Serializer>(
                &self,
                s: S,
            ) -> ::std::result::Result<S::Ok, S::Error> {
                s.serialize_str(&self.0)
            }
        }

        impl<'de> $crate::__serde::Deserialize<'de> for $name {
            fn deserialize<D: $crate::__serde::Deserializer<'de>>(
                d: D,
            ) -> ::std::result::Result<Self, D::Error> {
                let text =
                    <::std::borrow::Cow<'de, str> as $crate::__serde::Deserialize>::deserialize(d)?;
                $name::parse(&text).map_err(<D::Error as $crate::__serde::de::Error>::custom)
            }
        }
    };
}
