//! The index as bytes, for the SQLite backend's saved vector copy: rows, int8 codes and,
//! when the graph has every row, the graph.

use std::collections::VecDeque;

use super::{Slots, VectorIndex};
use crate::ann::{Ann, AnnConfig};

impl VectorIndex {
    pub(crate) fn dimensions(&self) -> usize {
        self.dimensions
    }

    /// Up to `n` ids spread evenly over the rows.
    pub(crate) fn ids_sample(&self, n: usize) -> Vec<i64> {
        let step = (self.ids.len() / n.max(1)).max(1);
        self.ids.iter().step_by(step).take(n).copied().collect()
    }

    /// The largest id, if any.
    pub(crate) fn max_id(&self) -> Option<i64> {
        self.ids.iter().copied().max()
    }

    /// Appends the index to `out` (see [`read_from`](VectorIndex::read_from)): rows, int8
    /// codes and, when the graph has taken in every row, the graph. Little-endian.
    pub(crate) fn write_to(&self, out: &mut Vec<u8>) {
        let n = self.ids.len();
        put_u64(out, self.dimensions as u64);
        put_u64(out, n as u64);
        out.reserve(n * (8 + 4 * self.dimensions + self.dimensions + 8) + 16);
        put_le(out, &self.ids);
        put_le(out, &self.data);
        put_le(out, &self.scales);
        put_le(out, &self.errors);
        out.extend_from_slice(bytemuck::cast_slice(&self.codes));
        let graph = self
            .ann
            .as_ref()
            .filter(|_| self.status().pending == 0)
            .and_then(Ann::graph_bytes);
        match graph {
            Some(bytes) => {
                put_u64(out, bytes.len() as u64);
                out.extend_from_slice(&bytes);
            }
            None => put_u64(out, 0),
        }
    }

    /// The rows of an index from what [`write_to`](VectorIndex::write_to) wrote, read from
    /// `src`, and its saved graph's bytes (empty if none): attach them with
    /// [`attach_graph`](VectorIndex::attach_graph) once the whole file has been checked.
    /// `None` if `src` does not hold such an index of `dimensions`.
    pub(crate) fn read_from(
        src: &mut dyn Source,
        dimensions: usize,
    ) -> Option<(VectorIndex, Vec<u8>)> {
        if src.u64()? != dimensions as u64 {
            return None;
        }
        let n = usize::try_from(src.u64()?).ok()?;
        let floats = n.checked_mul(dimensions)?;
        let ids: Vec<i64> = read_le(src, n)?;
        let data: Vec<f32> = read_le(src, floats)?;
        let scales: Vec<f32> = read_le(src, n)?;
        let errors: Vec<f32> = read_le(src, n)?;
        let mut codes = vec![0i8; floats];
        src.fill(bytemuck::cast_slice_mut(&mut codes))?;
        let graph_len = usize::try_from(src.u64()?).ok()?;
        // A length beyond what is left is refused by the source before anything is allocated.
        let mut graph = vec![0u8; src.check_len(graph_len)?];
        src.fill(&mut graph)?;
        let mut slots = Slots::with_capacity_and_hasher(n, Default::default());
        for (slot, id) in ids.iter().enumerate() {
            if slots.insert(*id, slot).is_some() {
                return None;
            }
        }
        if data
            .iter()
            .chain(&scales)
            .chain(&errors)
            .any(|x| !x.is_finite())
        {
            return None;
        }
        let index = VectorIndex {
            dimensions,
            data,
            codes,
            scales,
            errors,
            ids,
            slots,
            config: AnnConfig::disabled(),
            ann: None,
            pending: VecDeque::new(),
            last_removal: 0,
        };
        Some((index, graph))
    }

    /// Gives a freshly read index its approximate part: the saved `graph` if it holds
    /// exactly these rows, else one built in the background when due.
    pub(crate) fn attach_graph(&mut self, graph: &[u8], config: AnnConfig) {
        if !graph.is_empty() && self.ids.len() >= config.min_entries {
            self.ann = Ann::restore(self.dimensions, &config, graph)
                .filter(|ann| ann.size() == self.ids.len());
        }
        self.set_ann(config);
    }
}

/// Where a saved index is read from: every read fills its buffer completely or fails.
pub(crate) trait Source {
    /// Fills `buf`; `None` at the end of the data or on a read error.
    fn fill(&mut self, buf: &mut [u8]) -> Option<()>;

    /// `len` if that many bytes are left, else `None`.
    fn check_len(&self, len: usize) -> Option<usize>;

    fn u64(&mut self) -> Option<u64> {
        let mut b = [0u8; 8];
        self.fill(&mut b)?;
        Some(u64::from_le_bytes(b))
    }

    fn i64(&mut self) -> Option<i64> {
        let mut b = [0u8; 8];
        self.fill(&mut b)?;
        Some(i64::from_le_bytes(b))
    }
}

/// `n` values read from `src` (stored little-endian), straight into their vector.
fn read_le<T: bytemuck::Pod + ToLe>(src: &mut dyn Source, n: usize) -> Option<Vec<T>> {
    src.check_len(n.checked_mul(std::mem::size_of::<T>())?)?;
    let mut values = vec![T::zeroed(); n];
    src.fill(bytemuck::cast_slice_mut(&mut values))?;
    if !cfg!(target_endian = "little") {
        for v in &mut values {
            *v = v.to_le();
        }
    }
    Some(values)
}

/// Appends `values` as little-endian bytes (a plain copy on little-endian machines).
fn put_le<T: bytemuck::Pod + ToLe>(out: &mut Vec<u8>, values: &[T]) {
    if cfg!(target_endian = "little") {
        out.extend_from_slice(bytemuck::cast_slice(values));
    } else {
        for v in values {
            out.extend_from_slice(bytemuck::bytes_of(&v.to_le()));
        }
    }
}

/// Byte order conversion (its own inverse) for the stored value types.
trait ToLe: Copy {
    fn to_le(self) -> Self;
}

impl ToLe for i64 {
    fn to_le(self) -> Self {
        i64::to_le(self)
    }
}

impl ToLe for f32 {
    fn to_le(self) -> Self {
        f32::from_bits(self.to_bits().to_le())
    }
}

fn put_u64(out: &mut Vec<u8>, value: u64) {
    out.extend_from_slice(&value.to_le_bytes());
}
