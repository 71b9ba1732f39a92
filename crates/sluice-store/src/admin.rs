//! What the admin API (docs/admin.md) asks of a store: clear a limit's counting state, credit
//! it, read it (with what its modifiers set aside), and keep the override records with a feed of their
//! changes that every replica follows. The store knows a record only as an id and a JSON
//! text; what they mean is sluice-config's (`overrides`).

use std::future::Future;

use sluice_core::limit::{Decision, Hit};

use crate::StoreError;

/// One page of override records, by id, and the token of the next page (`None`: the last).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Page {
    pub records: Vec<(String, String)>,
    pub next: Option<String>,
}

/// What changed in the records since a cursor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Feed {
    /// These records changed, in order (`None`: deleted); the cursor to ask from next.
    Changes {
        changes: Vec<(String, Option<String>)>,
        cursor: String,
    },
    /// The changes since the cursor are no longer known (the store lost or trimmed them):
    /// load every record again (`all_overrides`).
    Reload,
}

/// Every record, and the cursor its feed continues from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Loaded {
    pub records: Vec<(String, String)>,
    pub cursor: String,
}

/// A limit's state as the admin API reads it (`AdminStore::read`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Reading {
    /// What a hit of cost 0 is told now, its modifiers left out.
    pub decision: Decision,
    /// What the state holds against the limit, in requests: past the capacity when it is
    /// over it (debt, a settle past the limit, the reference's counting).
    pub used: u64,
    /// What the limit's modifiers set aside of it now (`ModifierPolicy::held`: the estimates
    /// held for requests in flight); 0 for most.
    pub held: u64,
}

/// The admin operations of a store.
pub trait AdminStore: Send + Sync + 'static {
    /// `hit`'s limit now, read from the state its limit (modifiers included) names, without a
    /// write and without setting off a modifier.
    fn read(&self, hit: &Hit) -> impl Future<Output = Result<Reading, StoreError>> + Send;

    /// Clears the counting state of each hit's limit as of now (with `records`, the parts its
    /// modifiers keep that a reset clears too, `Modifiers::reset_parts`; never what they set
    /// aside for requests in flight). How many states there were.
    fn reset(
        &self,
        hits: &[Hit],
        records: bool,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send;

    /// Gives `hit.cost` back to its limit's state now (`Limit::credit`; the caller sends
    /// only limits whose algorithm takes credit); the decision of cost 0 after.
    fn credit(&self, hit: &Hit) -> impl Future<Output = Result<Decision, StoreError>> + Send;

    /// Puts the record `id`; its previous JSON.
    fn put_override(
        &self,
        id: &str,
        json: &str,
    ) -> impl Future<Output = Result<Option<String>, StoreError>> + Send;

    /// Deletes the record `id`; its previous JSON (`None`: there was none).
    fn delete_override(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<Option<String>, StoreError>> + Send;

    /// The record `id`.
    fn get_override(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<Option<String>, StoreError>> + Send;

    /// Up to about `count` records whose ids start with `prefix`, from the page `token`
    /// names (`""`: the first).
    fn list_overrides(
        &self,
        prefix: &str,
        token: &str,
        count: usize,
    ) -> impl Future<Output = Result<Page, StoreError>> + Send;

    /// Every record, and the cursor of the changes after them.
    fn all_overrides(&self) -> impl Future<Output = Result<Loaded, StoreError>> + Send;

    /// The changes after `cursor`.
    fn override_changes(
        &self,
        cursor: &str,
    ) -> impl Future<Output = Result<Feed, StoreError>> + Send;
}
