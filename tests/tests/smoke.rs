//! The shortest end-to-end path: a real daemon, a real session, read then edit.

use crate::common;

use common::*;
use serde_json::json;

#[test]
fn read_then_edit_through_the_real_daemon() {
    let d = Daemon::start();
    d.write("a.txt", "hello\nworld\n");
    let mut s = d.session();
    let p = d.path("a.txt");
    ok(&s.read("a.txt"), &envelope(&p, &["1: hello", "2: world"], "(End of file - total 2 lines)"));
    let r = s.call("edit", json!({"file_path": "a.txt", "old_string": "hello", "new_string": "HI"}));
    ok(&r, &format!("The file {} has been updated successfully.", p.display()));
    assert_eq!(d.read("a.txt"), b"HI\nworld\n");
    assert!(s.finish().success());
}
