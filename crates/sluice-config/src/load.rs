//! Loading: paths (files or directories) -> files -> one validated `Config`, all or nothing.
//! Directories are read recursively, every file whatever its name as in envoyproxy/ratelimit,
//! skipping names that start with `.`
//! (a Kubernetes ConfigMap mount keeps its real files in `..data/` and timestamped `..2026_*`
//! folders, linked from the top level: they must not load twice).

use std::collections::HashSet;
use std::fs;
use std::path::{Path, PathBuf};

use sluice_core::modifier::leasing;

use crate::bounds;
use crate::cel_limits;
use crate::compile::FileCompiler;
use crate::error::{ConfigError, ConfigErrors, FileError};
use crate::file;
use crate::position::Positions;
use crate::tree::{Config, Domain, Level, TreeMap};

/// How files combine.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LoadOptions {
    /// Several files may hold the same domain (`MERGE_DOMAIN_CONFIG`); their descriptors join.
    pub merge_domain_config: bool,
    /// Limits that do not say `debt` take debt (`--debt`).
    pub debt: bool,
    /// Every modifier that keeps something per request in flight (one with a ticket) is
    /// checked, then left out: its limits count as plain limits (the tools' flag that shows
    /// a limit with and without what it holds).
    pub without_tickets: bool,
    /// The reference's counting (`STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=false`), which a
    /// migration sharing counters with envoyproxy/ratelimit keeps: leased limits are refused.
    pub every_hit: bool,
    /// The limits of Limitador's limits files lease their budget (`--limits-file-leasing`,
    /// Limitador's `redis_cached`), each in chunks of at most `max_chunk` and a tenth of its
    /// `max_value`; a limit whose tenth is below 2 keeps the exact path.
    pub limits_file_leasing: Option<leasing::Policy>,
    /// The server holds limits across regions (`--region`, docs/regions.md): a limit may be
    /// `global`. Without it a global limit is refused, since each region would admit it whole.
    pub regions: bool,
}

/// Loads every configuration file under `paths`. Any error refuses the whole load.
pub fn load(paths: &[PathBuf], options: LoadOptions) -> Result<Config, ConfigErrors> {
    let mut errors = Vec::new();
    let files = config_files(paths, &mut errors);
    let mut domains = TreeMap::default();
    let mut warnings = Vec::new();
    for path in &files {
        match read_bounded(path) {
            Ok(Some(text)) => {
                errors.extend(add_file(&mut domains, path, &text, options, &mut warnings))
            }
            Ok(None) => errors.push(
                FileError {
                    path: path.clone(),
                    position: None,
                    reason: format!(
                        "the file is larger than {} bytes, the most a config file may be",
                        bounds::MAX_FILE_BYTES
                    ),
                }
                .into(),
            ),
            Err(source) => errors.push(ConfigError::Io {
                path: path.clone(),
                source,
            }),
        }
    }
    let named: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    let source = format!("files {}", named.join(","));
    finish(domains, errors, warnings).map(|config| with_source(config, source))
}

/// The text of `path`, or `None` when it is larger than `bounds::MAX_FILE_BYTES` (read no
/// further than that).
fn read_bounded(path: &Path) -> std::io::Result<Option<String>> {
    use std::io::Read;
    let mut text = String::new();
    fs::File::open(path)?
        .take(bounds::MAX_FILE_BYTES + 1)
        .read_to_string(&mut text)?;
    Ok((text.len() as u64 <= bounds::MAX_FILE_BYTES).then_some(text))
}

/// Compiles `text` as one configuration file named `name` (errors name it as its path): for
/// tests and tools that hold a configuration in memory.
pub fn load_str(name: &str, text: &str, options: LoadOptions) -> Result<Config, ConfigErrors> {
    let mut domains: TreeMap<Domain> = TreeMap::default();
    let mut warnings = Vec::new();
    let errors = add_file(&mut domains, Path::new(name), text, options, &mut warnings);
    finish(domains, errors, warnings)
}

/// Compiles xDS resources (`name`, resource), all or nothing, as files are.
pub fn load_docs_of(
    resources: Vec<(
        String,
        sluice_proto::ratelimit::config::ratelimit::v3::RateLimitConfig,
    )>,
    options: LoadOptions,
) -> Result<Config, ConfigErrors> {
    let docs = resources
        .into_iter()
        .map(|(name, resource)| (name, crate::resource::to_doc(&resource)))
        .collect();
    load_docs(docs, options)
}

/// Compiles the documents of xDS resources (`name`, document), all or nothing, as files are:
/// errors name the resource instead of a file and a line.
pub(crate) fn load_docs(
    docs: Vec<(String, file::FileDoc)>,
    options: LoadOptions,
) -> Result<Config, ConfigErrors> {
    let mut domains: TreeMap<Domain> = TreeMap::default();
    let mut errors = Vec::new();
    let mut warnings = Vec::new();
    for (name, doc) in docs {
        let path = PathBuf::from(name);
        let mut compiler = FileCompiler::new(&path, "", options);
        compile_doc(&mut compiler, &mut domains, &path, doc, options);
        warnings.append(&mut compiler.warnings);
        errors.extend(compiler.errors.into_iter().map(Into::into));
    }
    finish(domains, errors, warnings)
}

/// `config` as coming from `source`.
pub fn with_source(mut config: Config, source: String) -> Config {
    config.source = source;
    config
}

/// The config of `domains`, or every error.
fn finish(
    mut domains: TreeMap<Domain>,
    errors: Vec<ConfigError>,
    warnings: Vec<FileError>,
) -> Result<Config, ConfigErrors> {
    if !errors.is_empty() {
        return Err(ConfigErrors(errors));
    }
    for domain in domains.values_mut() {
        domain.label_rules();
        domain.note_read_entries();
    }
    Ok(Config {
        domains,
        warnings,
        source: String::new(),
    })
}

/// Parses and compiles one file into `domains`, returning its errors; its warnings go to
/// `warnings`.
fn add_file(
    domains: &mut TreeMap<Domain>,
    path: &Path,
    text: &str,
    options: LoadOptions,
    warnings: &mut Vec<FileError>,
) -> Vec<ConfigError> {
    if let Some(position) = bounds::too_deep(text) {
        let reason = format!(
            "maps and lists nest deeper than {} levels, the most a config file may",
            bounds::MAX_DEPTH
        );
        return vec![FileError {
            path: path.to_path_buf(),
            position: Some(position),
            reason,
        }
        .into()];
    }
    if cel_limits::is_limits_file(text) {
        return add_limits_file(domains, path, text, options);
    }
    let parsed = match file::parse(text) {
        Ok(parsed) => parsed,
        Err(error) => return vec![syntax_error(path, text, &error).into()],
    };
    let mut compiler = FileCompiler::new(path, text, options);
    for key_path in &parsed.misplaced {
        let key = key_path.rsplit('.').next().unwrap_or(key_path);
        let reason = format!(
            "'{key}' has no effect here and is ignored (envoyproxy/ratelimit ignores it too)"
        );
        compiler.warning(key_path, reason);
    }
    for key_path in &parsed.fractions {
        let reason = "a number with a fraction or an exponent is not a valid value (quote it to make it a string)";
        compiler.error(key_path, reason);
    }
    compile_doc(&mut compiler, domains, path, parsed.doc, options);
    warnings.append(&mut compiler.warnings);
    compiler.errors.into_iter().map(Into::into).collect()
}

/// Compiles one file's document into `domains`; errors stay in `compiler`.
fn compile_doc(
    compiler: &mut FileCompiler<'_>,
    domains: &mut TreeMap<Domain>,
    path: &Path,
    doc: file::FileDoc,
    options: LoadOptions,
) {
    let Some(name) = doc.domain.filter(|name| !name.is_empty()) else {
        compiler.error("", "config file cannot have empty domain");
        return;
    };
    let descriptors = doc.descriptors.unwrap_or_default();
    let parent_key = format!("{name}.");
    let has_tree = domains.get(&name).is_some_and(|domain| domain.has_tree);
    if has_tree && !options.merge_domain_config {
        compiler.error(
            "domain",
            format!("duplicate domain '{name}' in config file"),
        );
        // Still check the rest of the file, so every error is reported at once.
        compiler.add_descriptors(&mut Level::default(), &descriptors, "", &parent_key);
        return;
    }
    let domain = domain_named(domains, &name);
    domain.has_tree = true;
    domain.files.push(path.to_path_buf());
    compiler.add_descriptors(&mut domain.root, &descriptors, "", &parent_key);
}

/// The domain `name` of `domains`, added empty when it is not there yet.
fn domain_named<'d>(domains: &'d mut TreeMap<Domain>, name: &str) -> &'d mut Domain {
    domains.entry(name.to_string()).or_insert_with(|| Domain {
        name: name.to_string(),
        files: Vec::new(),
        root: Level::default(),
        read_entries: Vec::new(),
        cel_limits: Vec::new(),
        has_tree: false,
    })
}

/// Adds the limits of Limitador's limits file `path` to the domains of their namespaces (of
/// two limits alike across files, the first is kept); its refusals.
fn add_limits_file(
    domains: &mut TreeMap<Domain>,
    path: &Path,
    text: &str,
    options: LoadOptions,
) -> Vec<ConfigError> {
    let limits = match cel_limits::parse(path, text) {
        Ok(limits) => limits,
        Err(errors) => return errors.into_iter().map(Into::into).collect(),
    };
    for mut limit in limits {
        // The reference's counting refuses leasing (`compile::leasing_refusal`).
        if let Some(policy) = options.limits_file_leasing.filter(|_| !options.every_hit) {
            limit.lease(policy);
        }
        let domain = domain_named(domains, &limit.namespace);
        if !domain.files.iter().any(|file| file == path) {
            domain.files.push(path.to_path_buf());
        }
        if !domain
            .cel_limits
            .iter()
            .any(|l| l.identity == limit.identity)
        {
            domain.cel_limits.push(limit);
        }
    }
    Vec::new()
}

/// A serde_yaml error as `FileError`, its position moved out of the message (an error of a
/// document decoded after misplaced keys were taken out has none: its key path places it).
fn syntax_error(path: &Path, text: &str, error: &serde_yaml::Error) -> FileError {
    let message = error.to_string();
    let (reason, position) = match error.location() {
        Some(location) => {
            let reason = match message.rfind(" at line ") {
                Some(at) => message[..at].to_string(),
                None => message,
            };
            (reason, Some((location.line(), location.column())))
        }
        None => {
            let key_path = message.split(": ").next().unwrap_or_default();
            let position = Positions::of(text).find(key_path).or(Some((1, 1)));
            (message, position)
        }
    };
    FileError {
        path: path.to_path_buf(),
        position,
        reason,
    }
}

/// The files `paths` name: files as given, directories walked in name order.
fn config_files(paths: &[PathBuf], errors: &mut Vec<ConfigError>) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut seen_dirs = HashSet::new();
    for path in paths {
        match fs::metadata(path) {
            Ok(meta) if meta.is_dir() => walk(path, &mut files, &mut seen_dirs, errors),
            Ok(_) => files.push(path.clone()),
            Err(source) => errors.push(ConfigError::Io {
                path: path.clone(),
                source,
            }),
        }
    }
    files
}

fn walk(
    dir: &Path,
    files: &mut Vec<PathBuf>,
    seen_dirs: &mut HashSet<PathBuf>,
    errors: &mut Vec<ConfigError>,
) {
    let io_error = |source| ConfigError::Io {
        path: dir.to_path_buf(),
        source,
    };
    // Symbolic links may form a loop: visit each real directory once.
    match fs::canonicalize(dir) {
        Ok(real) => {
            if !seen_dirs.insert(real) {
                return;
            }
        }
        Err(source) => return errors.push(io_error(source)),
    }
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(source) => return errors.push(io_error(source)),
    };
    let mut paths: Vec<PathBuf> = entries.filter_map(Result::ok).map(|e| e.path()).collect();
    paths.sort();
    for path in paths {
        let hidden = path
            .file_name()
            .and_then(|name| name.to_str())
            .is_none_or(|name| name.starts_with('.'));
        if hidden {
            continue;
        }
        match fs::metadata(&path) {
            Ok(meta) if meta.is_dir() => walk(&path, files, seen_dirs, errors),
            Ok(_) => files.push(path),
            // A dangling link mid-swap is not a config file.
            Err(_) => {}
        }
    }
}
