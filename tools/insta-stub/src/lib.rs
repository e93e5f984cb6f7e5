//! Stands in for insta in release builds of sbx-tool-guard: brush-parser
//! 0.4 names insta (and with it pest, similar and console) as a normal
//! dependency though only its `#[cfg(test)]` code uses it. Nothing here;
//! a brush-parser that used insta outside its tests would fail to build.
