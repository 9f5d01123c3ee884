//! Throwaway services for deployment tests: a private certificate authority
//! with a certificate for 127.0.0.1, a PostgreSQL cluster that accepts only
//! TLS connections, and a Redis server with a password (and TLS), each on a
//! free port in a fresh temporary directory, stopped when dropped.
//!
//! They need programs from the machine: `openssl`, PostgreSQL's server
//! programs (the directory `VIDGATE_TEST_POSTGRES_BIN` names, e.g.
//! `/usr/lib/postgresql/15/bin`) and `redis-server` (`VIDGATE_TEST_REDIS_SERVER`).
//! Without the variables the tests that need them print a skip notice.

use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const POSTGRES_BIN_VARIABLE: &str = "VIDGATE_TEST_POSTGRES_BIN";
pub const REDIS_SERVER_VARIABLE: &str = "VIDGATE_TEST_REDIS_SERVER";

/// The value of a test variable, or `None` after a skip notice.
pub fn test_variable(variable: &str, test_name: &str) -> Option<String> {
    match std::env::var(variable) {
        Ok(value) if !value.is_empty() => Some(value),
        _ => {
            eprintln!("skipping {test_name}: set {variable} to run it (see .ci/run)");
            None
        }
    }
}

/// A port nobody listens on right now. Another process could take it before
/// the service binds it; on a test machine that is rare enough.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .expect("a free port")
}

fn run(command: &mut Command) {
    let output = command
        .output()
        .unwrap_or_else(|error| panic!("running {command:?}: {error}"));
    assert!(
        output.status.success(),
        "{command:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

fn path_text(path: &Path) -> &str {
    path.to_str().expect("a UTF-8 temporary path")
}

/// A certificate authority and a server certificate it signed for
/// 127.0.0.1 and localhost, made with the `openssl` program.
pub struct Certificates {
    /// Holds the files below; they go when it is dropped.
    _directory: tempfile::TempDir,
    /// The authority's certificate: what clients trust.
    pub authority: PathBuf,
    pub server_certificate: PathBuf,
    pub server_key: PathBuf,
}

impl Certificates {
    pub fn new() -> Certificates {
        let directory = tempfile::tempdir().unwrap();
        let file = |name: &str| directory.path().join(name);
        let elliptic_key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"];
        run(Command::new("openssl")
            .args(["req", "-x509", "-nodes", "-days", "2"])
            .args(elliptic_key)
            .args(["-subj", "/CN=vidgate test authority", "-keyout"])
            .args([file("authority.key"), "-out".into(), file("authority.pem")]));
        run(Command::new("openssl")
            .args(["req", "-nodes"])
            .args(elliptic_key)
            .args(["-subj", "/CN=127.0.0.1", "-keyout"])
            .args([file("server.key"), "-out".into(), file("server.csr")]));
        std::fs::write(
            file("server.ext"),
            "subjectAltName=IP:127.0.0.1,DNS:localhost\n\
             basicConstraints=CA:FALSE\n\
             extendedKeyUsage=serverAuth\n",
        )
        .unwrap();
        run(Command::new("openssl")
            .args(["x509", "-req", "-days", "2", "-in"])
            .arg(file("server.csr"))
            .arg("-CA")
            .arg(file("authority.pem"))
            .arg("-CAkey")
            .arg(file("authority.key"))
            .args(["-CAcreateserial", "-extfile"])
            .arg(file("server.ext"))
            .arg("-out")
            .arg(file("server.pem")));
        Certificates {
            authority: file("authority.pem"),
            server_certificate: file("server.pem"),
            server_key: file("server.key"),
            _directory: directory,
        }
    }
}

/// PostgreSQL refuses to run as root; as root, its programs run as the
/// `postgres` user, which then owns the cluster's directory.
fn running_as_root() -> bool {
    std::fs::metadata("/proc/self").is_ok_and(|metadata| metadata.uid() == 0)
}

/// A PostgreSQL cluster of its own whose `pg_hba.conf` accepts TLS
/// connections from 127.0.0.1 without a password and refuses every
/// connection without TLS, so a successful connection proves TLS was used.
pub struct TlsPostgres {
    pub port: u16,
    bin: PathBuf,
    data: PathBuf,
    _directory: tempfile::TempDir,
}

impl TlsPostgres {
    pub fn start(bin: &str, certificates: &Certificates) -> TlsPostgres {
        let bin = PathBuf::from(bin);
        let directory = tempfile::tempdir().unwrap();
        let data = directory.path().join("data");
        let certificate = directory.path().join("server.pem");
        let key = directory.path().join("server.key");
        std::fs::copy(&certificates.server_certificate, &certificate).unwrap();
        std::fs::copy(&certificates.server_key, &key).unwrap();
        if running_as_root() {
            run(Command::new("chown")
                .args(["-R", "postgres:"])
                .arg(directory.path()));
        }
        // PostgreSQL refuses a key file that others can read.
        run(Command::new("chmod").arg("600").arg(&key));
        run(as_database_user(&bin.join("initdb"))
            .args(["--auth=trust", "--username=postgres", "--no-sync", "-D"])
            .arg(&data));
        std::fs::write(
            data.join("pg_hba.conf"),
            "hostssl all all 127.0.0.1/32 trust\nhostnossl all all all reject\n",
        )
        .unwrap();
        let port = free_port();
        let server_options = format!(
            "-p {port} -k {socket} -c listen_addresses=127.0.0.1 -c fsync=off \
             -c ssl=on -c ssl_cert_file={certificate} -c ssl_key_file={key}",
            socket = path_text(directory.path()),
            certificate = path_text(&certificate),
            key = path_text(&key),
        );
        run(as_database_user(&bin.join("pg_ctl"))
            .args(["start", "--wait", "-D"])
            .arg(&data)
            .arg("-l")
            .arg(directory.path().join("server.log"))
            .args(["-o", &server_options])
            .stdout(Stdio::null()));
        TlsPostgres {
            port,
            bin,
            data,
            _directory: directory,
        }
    }

    /// A URL of the `postgres` database with `query` (e.g. `sslmode=…`).
    pub fn url(&self, query: &str) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{}/postgres?{query}",
            self.port
        )
    }
}

fn as_database_user(program: &Path) -> Command {
    if running_as_root() {
        let mut command = Command::new("runuser");
        command.args(["-u", "postgres", "--"]).arg(program);
        command
    } else {
        Command::new(program)
    }
}

impl Drop for TlsPostgres {
    fn drop(&mut self) {
        let _ = as_database_user(&self.bin.join("pg_ctl"))
            .args(["stop", "--mode=immediate", "-D"])
            .arg(&self.data)
            .stdout(Stdio::null())
            .status();
    }
}

/// A Redis server with the password `password`, on a plain port and on a
/// TLS port whose certificate `certificates` signed.
pub struct PasswordRedis {
    pub plain_port: u16,
    pub tls_port: u16,
    child: Child,
    _directory: tempfile::TempDir,
}

impl PasswordRedis {
    pub fn start(program: &str, password: &str, certificates: &Certificates) -> PasswordRedis {
        let directory = tempfile::tempdir().unwrap();
        let plain_port = free_port();
        let tls_port = free_port();
        let child = Command::new(program)
            .arg("--port")
            .arg(plain_port.to_string())
            .arg("--tls-port")
            .arg(tls_port.to_string())
            .arg("--tls-cert-file")
            .arg(&certificates.server_certificate)
            .arg("--tls-key-file")
            .arg(&certificates.server_key)
            .arg("--tls-ca-cert-file")
            .arg(&certificates.authority)
            .args(["--tls-auth-clients", "no", "--requirepass", password])
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(directory.path())
            .stdout(Stdio::null())
            .spawn()
            .unwrap_or_else(|error| panic!("starting {program}: {error}"));
        let redis = PasswordRedis {
            plain_port,
            tls_port,
            child,
            _directory: directory,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        for port in [plain_port, tls_port] {
            while TcpStream::connect(("127.0.0.1", port)).is_err() {
                assert!(Instant::now() < deadline, "redis-server did not listen");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        redis
    }
}

impl Drop for PasswordRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The `moto_server` program (`VIDGATE_TEST_MOTO_SERVER`, relative to the
/// workspace root as `.ci/run` exports it), or `None` after a skip notice.
pub fn moto_program(test_name: &str) -> Option<PathBuf> {
    let program = test_variable("VIDGATE_TEST_MOTO_SERVER", test_name)?;
    Some(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .join(program),
    )
}

/// moto's S3 server on a free port with one bucket, killed when dropped.
pub struct Moto {
    pub endpoint: String,
    child: Child,
}

impl Moto {
    pub async fn start(program: &Path, bucket: &str) -> Moto {
        let port = free_port();
        let child = Command::new(program)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|error| panic!("starting {}: {error}", program.display()));
        let moto = Moto {
            endpoint: format!("http://127.0.0.1:{port}"),
            child,
        };
        let client = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        // moto checks no credentials, so a plain PUT creates the bucket.
        loop {
            if let Ok(response) = client
                .put(format!("{}/{bucket}", moto.endpoint))
                .send()
                .await
            {
                assert!(response.status().is_success(), "{}", response.status());
                return moto;
            }
            assert!(Instant::now() < deadline, "moto_server never answered");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The keys in `bucket` under `prefix`, from a ListObjectsV2 answer.
    pub async fn keys(&self, bucket: &str, prefix: &str) -> Vec<String> {
        let listing = reqwest::get(format!(
            "{}/{bucket}?list-type=2&prefix={prefix}",
            self.endpoint
        ))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
        listing
            .split("<Key>")
            .skip(1)
            .filter_map(|rest| rest.split_once("</Key>"))
            .map(|(key, _)| key.to_owned())
            .collect()
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
