//! `pap-agent install-mcp`: configures a local MCP client to spawn `pap-agent host stdio` as a
//! device of its own (AIP-63 "Auth model": local clients are paired devices too).
//!
//! The credential goes to `STATE/devices/CLIENT.bearer` (0600), which the config names; it is
//! never printed and never sits in the client's config. Installing again mints a new device,
//! points the config at it and then unpairs the one the earlier install made (found through that
//! same file), so repeating the command leaves exactly one device per client. The rest of the
//! client's config is kept as it was; a config that is not a JSON object is left untouched and
//! refused.

use std::path::{Path, PathBuf};

use pap_shared::{Clock, Rng};
use serde_json::{Map, Value, json};

use crate::pairing::{Bearer, Device, Devices, DevicesError};

/// The name of our entry in a client's server list.
pub const ENTRY: &str = "pap-agent-browser";

/// An MCP client whose config file `install-mcp` knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Client {
    /// Claude Code: its user configuration `~/.claude.json` (what `claude mcp add --scope user`
    /// writes), servers under `mcpServers` with a `type`.
    ClaudeCode,
    /// Claude Desktop: `claude_desktop_config.json`, servers under `mcpServers`.
    ClaudeDesktop,
    /// Cursor: `~/.cursor/mcp.json`, servers under `mcpServers`.
    Cursor,
    /// Visual Studio Code: the user's `mcp.json`, servers under `servers` with a `type`.
    Vscode,
}

impl std::str::FromStr for Client {
    type Err = String;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        match name {
            "claude-code" => Ok(Self::ClaudeCode),
            "claude-desktop" => Ok(Self::ClaudeDesktop),
            "cursor" => Ok(Self::Cursor),
            "vscode" => Ok(Self::Vscode),
            other => Err(format!(
                "{other}: not a client install-mcp knows (claude-code, claude-desktop, cursor, vscode)"
            )),
        }
    }
}

impl Client {
    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Self::ClaudeCode => "claude-code",
            Self::ClaudeDesktop => "claude-desktop",
            Self::Cursor => "cursor",
            Self::Vscode => "vscode",
        }
    }

    /// Where the client keeps its MCP config, as each documents it for this system.
    pub fn default_config(self) -> Result<PathBuf, InstallError> {
        let home = std::env::var_os("HOME")
            .map(PathBuf::from)
            .ok_or(InstallError::NoHome)?;
        let config_home = std::env::var_os("XDG_CONFIG_HOME")
            .map(PathBuf::from)
            .unwrap_or_else(|| home.join(".config"));
        let app_support = home.join("Library/Application Support");
        let macos = cfg!(target_os = "macos");
        Ok(match self {
            Self::ClaudeCode => home.join(".claude.json"),
            Self::ClaudeDesktop if macos => app_support.join("Claude/claude_desktop_config.json"),
            Self::ClaudeDesktop => config_home.join("Claude/claude_desktop_config.json"),
            Self::Cursor => home.join(".cursor/mcp.json"),
            Self::Vscode if macos => app_support.join("Code/User/mcp.json"),
            Self::Vscode => config_home.join("Code/User/mcp.json"),
        })
    }

    fn servers_key(self) -> &'static str {
        match self {
            Self::Vscode => "servers",
            Self::ClaudeCode | Self::ClaudeDesktop | Self::Cursor => "mcpServers",
        }
    }
}

/// What an install did.
#[derive(Debug)]
pub struct Installed {
    /// The device the client now is.
    pub device: Device,
    /// The device an earlier install made, now unpaired.
    pub replaced: Option<String>,
    /// The credential file the config names.
    pub bearer_file: PathBuf,
}

/// Why an install did not happen (nothing changed then, but for a device minted and left
/// unused when the config could not be written, which is unpaired again).
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    /// No `$HOME` to find the client's config under: name it with `--config`.
    #[error("no $HOME to find the client's config under: name it with --config")]
    NoHome,
    /// The client's config is not a JSON object: left as it is.
    #[error("{0} is not a JSON object; it was left as it is")]
    NotAnObject(PathBuf),
    /// Reading or writing a file.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The devices file.
    #[error(transparent)]
    Devices(#[from] DevicesError),
}

/// Installs `program` (this `pap-agent`, run with the global options `global`) as `client`'s
/// MCP server in `config`, as a fresh device of the agent in `state`.
#[allow(
    clippy::too_many_arguments,
    reason = "each is one fact of the install, named at the call"
)]
pub fn install(
    devices: &Devices,
    state: &Path,
    client: Client,
    config: &Path,
    program: &Path,
    global: &[String],
    clock: &dyn Clock,
    rng: &dyn Rng,
) -> Result<Installed, InstallError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| InstallError::Io { path, source }
    };
    let mut document = read_config(config, client)?;
    let state = std::fs::canonicalize(state).map_err(io(state))?;
    let dir = pap_browser::store::private_dir(&state.join("devices")).map_err(io(&state))?;
    let bearer_file = dir.join(format!("{}.bearer", client.name()));
    let earlier = match std::fs::read_to_string(&bearer_file) {
        Ok(text) => devices.authenticate(&Bearer::presented(&zeroize::Zeroizing::new(text)))?,
        Err(_) => None,
    };

    let (device, bearer) = devices.mint(&format!("install:{}", client.name()), "install", clock, rng)?;
    let args = [
        "host".to_owned(),
        "stdio".to_owned(),
        "--bearer-file".to_owned(),
        bearer_file.display().to_string(),
    ];
    let written = write_entry(&mut document, client, config, program, global, &state, ENTRY, &args).and_then(|()| {
        pap_browser::store::write_private(&bearer_file, bearer.expose().as_bytes()).map_err(io(&bearer_file))
    });
    if let Err(error) = written {
        devices.revoke(&device.id, clock.now())?;
        return Err(error);
    }
    let replaced = match earlier {
        Some(old) => {
            devices.revoke(&old.id, clock.now())?;
            Some(old.id)
        }
        None => None,
    };
    Ok(Installed {
        device,
        replaced,
        bearer_file,
    })
}

/// The entry name of a host reached through the tunnel: one per host, so a client can hold
/// several beside the local one.
pub fn tunnel_entry(fingerprint: &str) -> String {
    format!("{ENTRY}-{}", fingerprint.get(..8).unwrap_or(fingerprint))
}

/// Configures `client` (in `config`) to spawn `program pair stdio FINGERPRINT`: the host paired
/// over a rendezvous (`pap-agent pair accept`), reached through the tunnel by a client that
/// only spawns servers. The credential stays where `pair accept` kept it; nothing new is paired.
pub fn install_tunnel(
    state: &Path,
    client: Client,
    config: &Path,
    program: &Path,
    global: &[String],
    fingerprint: &str,
) -> Result<String, InstallError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| InstallError::Io { path, source }
    };
    let mut document = read_config(config, client)?;
    let state = std::fs::canonicalize(state).map_err(io(state))?;
    let name = tunnel_entry(fingerprint);
    let args = ["pair".to_owned(), "stdio".to_owned(), fingerprint.to_owned()];
    write_entry(&mut document, client, config, program, global, &state, &name, &args)?;
    Ok(name)
}

/// The client's config file as a JSON object (an empty one when there is none yet), refused
/// when it or its servers' map is something else: we never overwrite what we cannot read.
fn read_config(config: &Path, client: Client) -> Result<Map<String, Value>, InstallError> {
    let document = match std::fs::read(config) {
        Ok(bytes) => match serde_json::from_slice::<Value>(&bytes) {
            Ok(Value::Object(object)) => object,
            _ => return Err(InstallError::NotAnObject(config.to_path_buf())),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Map::new(),
        Err(source) => {
            return Err(InstallError::Io {
                path: config.to_path_buf(),
                source,
            });
        }
    };
    if document
        .get(client.servers_key())
        .is_some_and(|servers| !servers.is_object())
    {
        return Err(InstallError::NotAnObject(config.to_path_buf()));
    }
    Ok(document)
}

/// Puts the entry `name` (running `program` with the state, `global` and `args`) in `document`
/// and writes it to `config` whole (a temporary file renamed).
#[allow(
    clippy::too_many_arguments,
    reason = "each is one fact of the entry, named at the call"
)]
fn write_entry(
    document: &mut Map<String, Value>,
    client: Client,
    config: &Path,
    program: &Path,
    global: &[String],
    state: &Path,
    name: &str,
    command: &[String],
) -> Result<(), InstallError> {
    let io = |source| InstallError::Io {
        path: config.to_path_buf(),
        source,
    };
    let mut args = vec!["--state-dir".to_owned(), state.display().to_string()];
    args.extend(global.iter().cloned());
    args.extend(command.iter().cloned());
    let mut entry = json!({ "command": program.display().to_string(), "args": args });
    if matches!(client, Client::Vscode | Client::ClaudeCode) {
        entry["type"] = json!("stdio");
    }
    let servers = document
        .entry(client.servers_key())
        .or_insert_with(|| Value::Object(Map::new()));
    if let Value::Object(servers) = servers {
        servers.insert(name.to_owned(), entry);
    }
    if let Some(parent) = config.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(io)?;
    }
    let mut bytes = serde_json::to_vec_pretty(document).map_err(|e| io(std::io::Error::other(e)))?;
    bytes.push(b'\n');
    pap_browser::store::write_private(config, &bytes).map_err(io)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly")]

    use super::*;
    use pap_shared::{SystemClock, SystemRng};

    #[test]
    fn installing_twice_leaves_one_device_and_keeps_the_clients_other_servers() {
        let dir = std::env::temp_dir().join(format!("pap-install-{}", std::process::id()));
        let state = dir.join("state");
        std::fs::create_dir_all(&state).unwrap();
        let config = dir.join("cursor/mcp.json");
        std::fs::create_dir_all(config.parent().unwrap()).unwrap();
        std::fs::write(
            &config,
            r#"{"mcpServers": {"other": {"command": "x"}}, "theme": "dark"}"#,
        )
        .unwrap();
        let devices = Devices::at(&state);
        let program = Path::new("/usr/bin/pap-agent");
        let install_cursor = || {
            install(
                &devices,
                &state,
                Client::Cursor,
                &config,
                program,
                &[],
                &SystemClock,
                &SystemRng,
            )
        };

        let first = install_cursor().unwrap();
        assert!(first.replaced.is_none());
        let second = install_cursor().unwrap();
        assert_eq!(second.replaced.as_deref(), Some(first.device.id.as_str()));
        let listed = devices.list().unwrap();
        assert_eq!(listed, vec![second.device.clone()]);

        let written: Value = serde_json::from_slice(&std::fs::read(&config).unwrap()).unwrap();
        assert_eq!(written["theme"], "dark");
        assert_eq!(written["mcpServers"]["other"]["command"], "x");
        let args = written["mcpServers"][ENTRY]["args"].to_string();
        assert!(args.contains("\"stdio\"") && args.contains(".bearer"), "{args}");
        let bearer = std::fs::read_to_string(&second.bearer_file).unwrap();
        assert!(!std::fs::read_to_string(&config).unwrap().contains(bearer.trim()));
        assert_eq!(
            devices.authenticate(&Bearer::presented(&bearer)).unwrap(),
            Some(second.device)
        );
        let mode =
            std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&second.bearer_file).unwrap().permissions());
        assert_eq!(mode & 0o777, 0o600);

        std::fs::write(&config, "[1, 2]").unwrap();
        assert!(matches!(install_cursor(), Err(InstallError::NotAnObject(_))));
        assert_eq!(std::fs::read_to_string(&config).unwrap(), "[1, 2]");
        assert_eq!(devices.list().unwrap().len(), 1);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Each client's entry has the layout that client documents: Claude Code's `~/.claude.json`
    /// and VS Code's `mcp.json` name the transport (`"type": "stdio"`), Claude Desktop's and
    /// Cursor's do not; the servers sit under `mcpServers`, or `servers` for VS Code. Claude
    /// Code's file is its whole user state: every other key stays.
    #[test]
    fn each_client_gets_the_layout_it_documents() {
        let dir = std::env::temp_dir().join(format!("pap-install-layouts-{}", std::process::id()));
        let state = dir.join("state");
        std::fs::create_dir_all(&state).unwrap();
        let devices = Devices::at(&state);
        for (client, servers, typed) in [
            (Client::ClaudeCode, "mcpServers", true),
            (Client::ClaudeDesktop, "mcpServers", false),
            (Client::Cursor, "mcpServers", false),
            (Client::Vscode, "servers", true),
        ] {
            let config = dir.join(format!("{}.json", client.name()));
            std::fs::write(
                &config,
                r#"{"projects": {"/src": {"allowedTools": []}}, "numStartups": 7}"#,
            )
            .unwrap();
            install(
                &devices,
                &state,
                client,
                &config,
                Path::new("/usr/bin/pap-agent"),
                &[],
                &SystemClock,
                &SystemRng,
            )
            .unwrap();
            let written: Value = serde_json::from_slice(&std::fs::read(&config).unwrap()).unwrap();
            let entry = &written[servers][ENTRY];
            assert_eq!(entry["command"], "/usr/bin/pap-agent", "{client:?}: {written}");
            assert!(entry["args"].as_array().is_some_and(|a| !a.is_empty()), "{client:?}");
            assert_eq!(entry.get("type").is_some(), typed, "{client:?}: {entry}");
            if typed {
                assert_eq!(entry["type"], "stdio");
            }
            assert_eq!(written["numStartups"], 7, "{client:?} lost its other keys");
            assert!(written["projects"]["/src"].is_object(), "{client:?}");
            assert_eq!(client.name().parse::<Client>().unwrap(), client);
        }
        assert!("claude".parse::<Client>().is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
