//! The crate's imports, read with a real parser (`syn`) instead of a grep:
//! every path in `src/` that names a module of the crate, in every form a
//! path takes (`use` groups, globs, renames and nesting; `crate::`,
//! `super::` and `self::` paths; paths that start at a name a `use`
//! brought in; paths in items, expressions and macro arguments), resolved
//! to the module, and the file, it names. What the checks in `layers.rs`
//! stand on.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use syn::buffer::{Cursor, TokenBuffer};
use syn::visit::Visit;

/// A module path from the crate root (`[]` is the root, `["runtime",
/// "supervisor"]` is `crate::runtime::supervisor`).
pub(super) type ModulePath = Vec<String>;

/// How deep resolution follows `use`s before it gives up: a loop in the
/// sources (which rustc would refuse anyway) must not hang the test.
const MAX_HOPS: usize = 32;

/// One module of the crate, from a file or an inline `mod x { … }`.
#[derive(Debug, Default)]
struct Module {
    /// The file it is written in, relative to `src/` (an inline module's is
    /// its parent's).
    file: PathBuf,
    /// The modules it declares (`mod x;`, `mod x { … }`): a path's segment
    /// that names one descends into it.
    children: BTreeSet<String>,
    /// Each name a `use` binds here (`use a::b` binds `b`, `use a::b as c`
    /// binds `c`), to the path as written: a path through this module that
    /// continues at such a name goes where the `use` points. Private `use`s
    /// too: a child's `super::Name` reaches them.
    aliases: BTreeMap<String, Vec<String>>,
    /// The paths of its glob `use`s (`use a::b::*` is `[a, b]`).
    globs: Vec<Vec<String>>,
}

/// One path in the sources that may name a module of the crate.
#[derive(Debug)]
pub(super) struct Reference {
    /// The file it is written in, relative to `src/`.
    pub(super) file: PathBuf,
    /// The module it is written in (an inline module's, inside a file).
    module: ModulePath,
    /// Its segments as written (`super`, `crate`, `self` kept).
    segments: Vec<String>,
    /// Whether it is a glob `use` (`…::*`).
    glob: bool,
}

impl Reference {
    /// The path as written, for a failure message.
    pub(super) fn text(&self) -> String {
        let mut text = self.segments.join("::");
        if self.glob {
            text.push_str("::*");
        }
        text
    }
}

/// The modules of the crate and every path its files write.
#[derive(Debug, Default)]
pub(super) struct Crate {
    /// Every module, by its path.
    modules: BTreeMap<ModulePath, Module>,
    /// Every path with two segments or more, and every `use` (the one-word
    /// paths in between are local names or names a `use` brought in, and
    /// that `use` is here).
    pub(super) references: Vec<Reference>,
}

/// The module a file under `src/` holds, or `None` for the binary's root
/// (`main.rs` is a crate of its own: its `crate::` is not the library).
pub(super) fn module_of_file(relative: &Path) -> Option<ModulePath> {
    let mut parts: Vec<String> = relative.iter().map(|part| part.to_string_lossy().into_owned()).collect();
    let last = parts.pop()?;
    let stem = last.strip_suffix(".rs")?;
    match (parts.is_empty(), stem) {
        (true, "lib") => Some(Vec::new()),
        (true, "main") => None,
        (_, "mod") => Some(parts),
        _ => {
            parts.push(stem.to_owned());
            Some(parts)
        }
    }
}

impl Crate {
    /// Reads every `.rs` file under `src`.
    pub(super) fn read_dir(src: &Path) -> Crate {
        let mut files = Vec::new();
        collect_files(src, &mut files);
        files.sort();
        Crate::read(files.into_iter().map(|file| {
            let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            (file.strip_prefix(src).unwrap().to_path_buf(), text)
        }))
    }

    /// Reads the given files (path relative to `src/`, text).
    pub(super) fn read(files: impl IntoIterator<Item = (PathBuf, String)>) -> Crate {
        let mut krate = Crate::default();
        for (file, text) in files {
            let Some(module) = module_of_file(&file) else { continue };
            let syntax = syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            krate.modules.entry(module.clone()).or_default().file = file.clone();
            let mut reader = Reader { krate: &mut krate, file, module };
            reader.visit_file(&syntax);
        }
        krate
    }

    /// Every file read, relative to `src/`.
    pub(super) fn files(&self) -> BTreeSet<&Path> {
        self.modules.values().map(|module| module.file.as_path()).collect()
    }

    /// The module of the file `file` (not an inline one inside it).
    pub(super) fn file_module(&self, file: &Path) -> ModulePath {
        module_of_file(file).expect("a file of the library")
    }

    /// The path from the crate root that `segments`, written in `module`,
    /// names; `None` when it names nothing of the crate (another crate, a
    /// local item or variable, a generic, `Self`).
    fn absolute(&self, module: &[String], segments: &[String], hops: usize) -> Option<Vec<String>> {
        let (first, rest) = segments.split_first()?;
        if hops > MAX_HOPS {
            return None;
        }
        match first.as_str() {
            "crate" => return Some(rest.to_vec()),
            "self" | "super" => {
                let mut base = module.to_vec();
                let mut taken = 0;
                for segment in segments {
                    match segment.as_str() {
                        "self" if taken == 0 => {}
                        "super" => {
                            base.pop()?;
                        }
                        _ => break,
                    }
                    taken += 1;
                }
                base.extend_from_slice(&segments[taken..]);
                return Some(base);
            }
            _ => {}
        }
        let here = self.modules.get(module)?;
        if here.children.contains(first) {
            let mut path = module.to_vec();
            path.extend_from_slice(segments);
            return Some(path);
        }
        if let Some(alias) = here.aliases.get(first) {
            let mut path = self.absolute(module, alias, hops + 1)?;
            path.extend_from_slice(rest);
            return Some(path);
        }
        // A name a glob brought in: only a module or a `use` of the glob's
        // module counts (an item there is reached by the glob's own path).
        for glob in &here.globs {
            let Some(target) = self.absolute(module, glob, hops + 1) else { continue };
            if let Some(there) = self.modules.get(&target) {
                if there.children.contains(first) || there.aliases.contains_key(first) {
                    return self.absolute(&target, segments, hops + 1);
                }
            }
        }
        None
    }

    /// The deepest module an absolute path names by module names alone,
    /// following no `use`: `runtime::Host` is `runtime` (whose `mod.rs`
    /// re-exports it), `runtime::host::Host` is `runtime::host`.
    fn named_module(&self, path: &[String]) -> ModulePath {
        let mut at = Vec::new();
        for segment in path {
            let child = self.modules.get(&at).is_some_and(|module| module.children.contains(segment));
            at.push(segment.clone());
            if !child || !self.modules.contains_key(&at) {
                at.pop();
                break;
            }
        }
        at
    }

    /// Every module an absolute path goes through when the `use`s on its way
    /// are followed to where the item is: each module whose `use` (a
    /// re-export) it passes, and the one it ends in. `crate::Host` passes
    /// the crate root and ends in `runtime::host`.
    fn modules_passed(&self, path: Vec<String>) -> Vec<ModulePath> {
        let mut passed = Vec::new();
        let mut path = path;
        for _ in 0..MAX_HOPS {
            let at = self.named_module(&path);
            let rest = path[at.len()..].to_vec();
            let next = rest.first().and_then(|name| self.follow(&at, name));
            passed.push(at);
            match next {
                Some(mut target) => {
                    target.extend_from_slice(&rest[1..]);
                    path = target;
                }
                None => break,
            }
        }
        passed
    }

    /// Where the name `name`, reached through module `at`, leads when `at`
    /// holds it by a `use` (directly or by a glob) and that leads into the
    /// crate.
    fn follow(&self, at: &[String], name: &String) -> Option<Vec<String>> {
        let module = self.modules.get(at)?;
        if let Some(alias) = module.aliases.get(name) {
            return self.absolute(at, alias, 0);
        }
        for glob in &module.globs {
            let Some(mut target) = self.absolute(at, glob, 0) else { continue };
            let there = self.modules.get(&target)?;
            if there.children.contains(name) || there.aliases.contains_key(name) {
                target.push(name.clone());
                return Some(target);
            }
        }
        None
    }

    /// The modules `reference` names, re-exports followed (see
    /// [`Crate::modules_passed`]); empty when it names nothing of the crate.
    pub(super) fn modules_named(&self, reference: &Reference) -> Vec<ModulePath> {
        match self.absolute(&reference.module, &reference.segments, 0) {
            Some(path) => self.modules_passed(path),
            None => Vec::new(),
        }
    }

    /// The file `reference` names, no re-export followed: the file of the
    /// deepest module its path names (a re-export through a `mod.rs` is an
    /// import of that `mod.rs`).
    pub(super) fn file_named(&self, reference: &Reference) -> Option<&Path> {
        let path = self.absolute(&reference.module, &reference.segments, 0)?;
        let module = self.named_module(&path);
        Some(self.modules.get(&module)?.file.as_path())
    }
}

fn collect_files(dir: &Path, files: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            collect_files(&path, files);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            files.push(path);
        }
    }
}

/// What one `use` path binds.
enum Binding {
    /// A name (`use a::b` binds `b`, `use a::b as c` binds `c`).
    Name(String),
    /// Everything public in it (`use a::*`).
    Glob,
    /// Nothing (`use a::Trait as _`).
    Nothing,
}

/// Flattens a `use` tree into its paths: `use a::{b, c::{self, d as e}}`
/// is `a::b` (binds `b`), `a::c` (binds `c`) and `a::c::d` (binds `e`).
fn flatten(tree: &syn::UseTree, prefix: &mut Vec<String>, out: &mut Vec<(Vec<String>, Binding)>) {
    match tree {
        syn::UseTree::Path(path) => {
            prefix.push(path.ident.to_string());
            flatten(&path.tree, prefix, out);
            prefix.pop();
        }
        syn::UseTree::Name(name) => {
            let (path, bound) = joined(prefix, &name.ident);
            out.push((path, Binding::Name(bound)));
        }
        syn::UseTree::Rename(rename) => {
            let (path, _) = joined(prefix, &rename.ident);
            let binding =
                if rename.rename == "_" { Binding::Nothing } else { Binding::Name(rename.rename.to_string()) };
            out.push((path, binding));
        }
        syn::UseTree::Glob(_) => out.push((prefix.clone(), Binding::Glob)),
        syn::UseTree::Group(group) => {
            for tree in &group.items {
                flatten(tree, prefix, out);
            }
        }
    }
}

/// `prefix::ident` and the name it binds; `self` in a group is the prefix.
fn joined(prefix: &[String], ident: &syn::Ident) -> (Vec<String>, String) {
    if ident == "self" {
        let bound = prefix.last().cloned().unwrap_or_default();
        (prefix.to_vec(), bound)
    } else {
        let mut path = prefix.to_vec();
        path.push(ident.to_string());
        (path, ident.to_string())
    }
}

/// Walks one file's syntax tree, recording its modules, `use`s and paths.
struct Reader<'a> {
    /// What is read so far.
    krate: &'a mut Crate,
    /// The file, relative to `src/`.
    file: PathBuf,
    /// The module being read (an inline `mod` pushes onto it).
    module: ModulePath,
}

impl Reader<'_> {
    fn record(&mut self, segments: Vec<String>, glob: bool) {
        self.krate.references.push(Reference { file: self.file.clone(), module: self.module.clone(), segments, glob });
    }

    /// The paths in a macro's arguments, which `syn` leaves as tokens:
    /// every `a::b…` run of identifiers, at any depth of brackets.
    fn scan_tokens(&mut self, mut cursor: Cursor<'_>) {
        while !cursor.eof() {
            if let Some((inside, _, _, after)) = cursor.any_group() {
                self.scan_tokens(inside);
                cursor = after;
            } else if let Some(after) = path_separator(cursor) {
                // `::other_crate::…`: the run after it is another crate's.
                cursor = ident_run(after).1;
            } else if cursor.ident().is_some() {
                let (segments, after) = ident_run(cursor);
                if segments.len() >= 2 {
                    self.record(segments, false);
                }
                cursor = after;
            } else {
                match cursor.token_tree() {
                    Some((_, after)) => cursor = after,
                    None => break,
                }
            }
        }
    }
}

/// The identifiers of the `a::b::c` run at `cursor`, and the cursor after it.
fn ident_run(mut cursor: Cursor<'_>) -> (Vec<String>, Cursor<'_>) {
    let mut segments = Vec::new();
    while let Some((ident, after)) = cursor.ident() {
        segments.push(ident.to_string());
        cursor = after;
        match path_separator(cursor) {
            Some(after) if after.ident().is_some() => cursor = after,
            _ => break,
        }
    }
    (segments, cursor)
}

/// The cursor after a `::` at `cursor`, if one is there.
fn path_separator(cursor: Cursor<'_>) -> Option<Cursor<'_>> {
    let (first, after) = cursor.punct()?;
    let (second, after) = after.punct()?;
    (first.as_char() == ':' && second.as_char() == ':').then_some(after)
}

impl<'ast> Visit<'ast> for Reader<'_> {
    fn visit_item_mod(&mut self, item: &'ast syn::ItemMod) {
        let name = item.ident.to_string();
        self.krate.modules.entry(self.module.clone()).or_default().children.insert(name.clone());
        if let Some((_, items)) = &item.content {
            self.module.push(name);
            self.krate.modules.entry(self.module.clone()).or_default().file = self.file.clone();
            for item in items {
                self.visit_item(item);
            }
            self.module.pop();
        }
    }

    fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
        if item.leading_colon.is_some() {
            return; // `use ::other_crate::…`
        }
        let mut paths = Vec::new();
        flatten(&item.tree, &mut Vec::new(), &mut paths);
        for (path, binding) in paths {
            let module = self.krate.modules.entry(self.module.clone()).or_default();
            let glob = matches!(binding, Binding::Glob);
            match binding {
                Binding::Name(name) => {
                    module.aliases.insert(name, path.clone());
                }
                Binding::Glob => module.globs.push(path.clone()),
                Binding::Nothing => {}
            }
            self.record(path, glob);
        }
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        if path.leading_colon.is_none() && path.segments.len() >= 2 {
            self.record(path.segments.iter().map(|segment| segment.ident.to_string()).collect(), false);
        }
        syn::visit::visit_path(self, path);
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        let tokens = TokenBuffer::new2(mac.tokens.clone());
        self.scan_tokens(tokens.begin());
        syn::visit::visit_macro(self, mac);
    }
}
