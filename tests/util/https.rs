//! A real Git smart-HTTP server on loopback: nginx with TLS (a throwaway CA
//! and certificate made with openssl by the test) and basic auth (an
//! htpasswd made by the test), git-http-backend behind fcgiwrap. Beside it
//! run a redirector, which answers every request with a 302 to another host
//! name (`localhost` instead of `127.0.0.1`), and the git server on that
//! other host, which logs the Authorization header of every request.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::certs::{self, openssl, OPENSSL};
use super::servers::{available, free_port, git_http_backend, wait_for_port, Group};

const NGINX: &str = "/usr/sbin/nginx";
const FCGIWRAP: &str = "/usr/sbin/fcgiwrap";

pub struct HttpsServer {
    dir: tempfile::TempDir,
    /// The git server on 127.0.0.1.
    pub port: u16,
    /// Answers everything with a redirect to `other_port` on `localhost`.
    pub redirect_port: u16,
    /// A git server reached as `localhost`, with the same basic auth.
    pub other_port: u16,
    // Dropped in this order: nginx first, then what it forwards to.
    _nginx: Group,
    _fcgi: Group,
}

impl HttpsServer {
    /// Starts the servers; basic auth accepts `user` with `password`. `None`
    /// when the programs are missing and the test is skipped.
    pub fn start(user: &str, password: &str) -> Option<HttpsServer> {
        let backend = git_http_backend();
        let programs = [
            Path::new(NGINX),
            Path::new(FCGIWRAP),
            Path::new(OPENSSL),
            &backend,
        ];
        if !available("https remote tests", &programs) {
            return None;
        }
        let dir = tempfile::Builder::new()
            .prefix("tend-https-")
            .tempdir()
            .unwrap();
        let d = dir.path();
        make_certificates(d);
        let hash = openssl(d, &["passwd", "-apr1", "-stdin"], Some(password));
        std::fs::write(d.join("htpasswd"), format!("{user}:{}\n", hash.trim())).unwrap();
        std::fs::create_dir(d.join("repos")).unwrap();
        std::fs::create_dir(d.join("tmp")).unwrap();

        let mut fcgi = Command::new(FCGIWRAP);
        fcgi.arg("-s")
            .arg(format!("unix:{}", d.join("fcgi.sock").display()))
            .stdout(Stdio::null())
            .stderr(log_file(&d.join("fcgi.log")));
        let fcgi = Group::spawn(fcgi);
        assert!(
            super::wait_until(20, || d.join("fcgi.sock").exists()),
            "fcgiwrap did not create its socket"
        );

        let (port, redirect_port, other_port) = (free_port(), free_port(), free_port());
        std::fs::write(
            d.join("nginx.conf"),
            nginx_config(d, &backend, port, redirect_port, other_port),
        )
        .unwrap();
        let mut nginx = Command::new(NGINX);
        nginx
            .arg("-p")
            .arg(d)
            .arg("-c")
            .arg(d.join("nginx.conf"))
            .arg("-e")
            .arg(d.join("error.log"))
            .stdout(Stdio::null())
            .stderr(log_file(&d.join("error.log")));
        let mut nginx = Group::spawn(nginx);
        let up = [port, redirect_port, other_port]
            .iter()
            .all(|p| wait_for_port(*p, 20));
        if !up || nginx.exited() {
            panic!(
                "nginx did not start:\n{}",
                std::fs::read_to_string(d.join("error.log")).unwrap_or_default()
            );
        }
        Some(HttpsServer {
            dir,
            port,
            redirect_port,
            other_port,
            _nginx: nginx,
            _fcgi: fcgi,
        })
    }

    /// The throwaway CA that signed the servers' certificate.
    pub fn ca_file(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }

    /// Serves the repository in `work_tree` as `/<name>` on every server.
    pub fn publish(&self, name: &str, work_tree: &Path) {
        std::os::unix::fs::symlink(
            work_tree.join(".git"),
            self.dir.path().join("repos").join(name),
        )
        .unwrap();
    }

    pub fn url(&self, name: &str) -> String {
        format!("https://127.0.0.1:{}/{name}", self.port)
    }

    pub fn redirect_url(&self, name: &str) -> String {
        format!("https://127.0.0.1:{}/{name}", self.redirect_port)
    }

    /// Requests to the main server: `"<request>" <status> user=<user>`.
    pub fn access_log(&self) -> String {
        self.log("access.log")
    }

    /// Requests to the other host, each with its Authorization header.
    pub fn other_log(&self) -> String {
        self.log("other.log")
    }

    pub fn redirect_log(&self) -> String {
        self.log("redirect.log")
    }

    fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.path().join(name)).unwrap_or_default()
    }
}

fn log_file(path: &Path) -> std::fs::File {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap()
}

/// A CA, and a server certificate it signs for 127.0.0.1 and localhost.
fn make_certificates(dir: &Path) {
    certs::authority(dir);
    certs::signed(dir, "server", "127.0.0.1", certs::SERVER);
}

fn nginx_config(dir: &Path, backend: &Path, port: u16, redirect: u16, other: u16) -> String {
    let d = dir.display();
    let git = |log: &str| {
        format!(
            r#"
    ssl_certificate {d}/server.pem;
    ssl_certificate_key {d}/server.key;
    access_log {d}/{log} req;
    location / {{
      auth_basic "git";
      auth_basic_user_file {d}/htpasswd;
      fastcgi_pass unix:{d}/fcgi.sock;
      fastcgi_param SCRIPT_FILENAME {backend};
      fastcgi_param GIT_PROJECT_ROOT {d}/repos;
      fastcgi_param GIT_HTTP_EXPORT_ALL "";
      fastcgi_param PATH_INFO $uri;
      fastcgi_param REMOTE_USER $remote_user;
      fastcgi_param REQUEST_METHOD $request_method;
      fastcgi_param QUERY_STRING $query_string;
      fastcgi_param CONTENT_TYPE $content_type;
      fastcgi_param CONTENT_LENGTH $content_length;
    }}
    # Authenticated, then an error page from a backend that is not there.
    location /broken.git/ {{
      auth_basic "git";
      auth_basic_user_file {d}/htpasswd;
      fastcgi_pass unix:{d}/nothing.sock;
    }}"#,
            backend = backend.display()
        )
    };
    format!(
        r#"daemon off;
master_process off;
pid {d}/nginx.pid;
error_log {d}/error.log info;
events {{ worker_connections 64; }}
http {{
  log_format req '"$request" $status user=$remote_user authorization="$http_authorization"';
  client_body_temp_path {d}/tmp/body;
  proxy_temp_path {d}/tmp/proxy;
  fastcgi_temp_path {d}/tmp/fastcgi;
  uwsgi_temp_path {d}/tmp/uwsgi;
  scgi_temp_path {d}/tmp/scgi;
  server {{
    listen 127.0.0.1:{port} ssl;{main}
  }}
  server {{
    listen 127.0.0.1:{redirect} ssl;
    ssl_certificate {d}/server.pem;
    ssl_certificate_key {d}/server.key;
    access_log {d}/redirect.log req;
    location / {{ return 302 https://localhost:{other}$request_uri; }}
  }}
  server {{
    listen 127.0.0.1:{other} ssl;{other_git}
  }}
}}
"#,
        main = git("access.log"),
        other_git = git("other.log"),
    )
}
