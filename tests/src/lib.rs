//! End-to-end test package: the tests live in `tests/`; this library is empty on purpose.
