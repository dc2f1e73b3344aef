//! docs/escalation.md's approver recipe, run as written (the block marked `approver.sh`), after
//! the README's line that makes the daemon's user and group `fsd`: in a mount namespace of its
//! own whose `/etc` is a copy and whose `/run`, `/var/log` and `/usr/local/bin` are empty tmpfs,
//! so the users and groups it adds, its key, socket and log vanish with the namespace and the
//! machine is left as it was. The machine has no sudo: a `sudo` in the namespace's
//! `/usr/local/bin` runs `sudo -u USER CMD…` as `runuser -u USER -- CMD…`. It fails if the recipe
//! breaks (a user outside the socket's group cannot give the socket to it), and checks what the
//! recipe promises: the socket 0660 of group `fsd`, the decision log and the key 0600, the
//! approver's user's own, and the rule file `--rules` names (the recipe writes it: nothing here
//! does, so a recipe that forgets it fails as it would on a machine).

use crate::common;

use std::process::Command;

fn repo() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

#[test]
fn the_approver_recipe_runs_as_written() {
    let escalation = std::fs::read_to_string(repo().join("docs/escalation.md")).unwrap();
    let recipe = common::docs::marked_blocks(&escalation, "test").remove("approver.sh").unwrap();
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let systemd = common::docs::marked_blocks(&readme, "test").remove("systemd.sh").unwrap();
    let fsd_user = systemd.lines().find(|l| l.contains("useradd")).unwrap().trim_start_matches("sudo ");
    let scratch = tempfile::tempdir().unwrap();
    std::fs::write(scratch.path().join("recipe.sh"), &recipe).unwrap();
    let approver = common::bin_dir().join("fsd-approver");
    let harness = format!(
        r#"set -eu
S={scratch}
cp -a /etc "$S/etc" && mount --bind "$S/etc" /etc
for d in /run /var/log /usr/local/bin; do mount -t tmpfs -o mode=0755 tmpfs "$d"; done
cp {approver} /usr/local/bin/fsd-approver
printf '#!/bin/sh\n[ "$1" = -u ] || exit 2\nu=$2; shift 2\nexec runuser -u "$u" -- "$@"\n' > /usr/local/bin/sudo
chmod 0755 /usr/local/bin/sudo
export PATH=/usr/local/bin:$PATH
{fsd_user}
setsid bash -eu "$S/recipe.sh" </dev/null >"$S/out" 2>&1 &
pid=$!
while [ ! -S /run/fsd-approver/approver.sock ]; do
    if ! kill -0 "$pid" 2>/dev/null; then echo "the recipe stopped:"; cat "$S/out"; exit 1; fi
    sleep 0.05
done
stat -c '%n %a %U %G' /run/fsd-approver/approver.sock /var/log/fsd-approver/decisions.jsonl /etc/fsd-approver/approver.key \
    /etc/fsd-approver/rules.toml
kill -TERM -- "-$pid"
wait "$pid" || true
"#,
        scratch = scratch.path().display(),
        approver = approver.display(),
    );
    let out = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "bash", "-c", &harness])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(
        stdout,
        "/run/fsd-approver/approver.sock 660 fsd-approver fsd\n\
         /var/log/fsd-approver/decisions.jsonl 600 fsd-approver fsd-approver\n\
         /etc/fsd-approver/approver.key 600 fsd-approver root\n\
         /etc/fsd-approver/rules.toml 644 fsd-approver root\n"
    );
}
