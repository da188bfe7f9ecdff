//! The index as bytes, for the SQLite backend's saved vector copy: rows, int8 codes and,
//! when the graph has every row, the graph.

use std::collections::{HashMap, VecDeque};

use super::VectorIndex;
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
        for id in &self.ids {
            out.extend_from_slice(&id.to_le_bytes());
        }
        for x in self.data.iter().chain(&self.scales).chain(&self.errors) {
            out.extend_from_slice(&x.to_le_bytes());
        }
        out.extend(self.codes.iter().map(|c| c.to_le_bytes()[0]));
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

    /// An index from what [`write_to`](VectorIndex::write_to) wrote, with the approximate
    /// part following `config` (the saved graph if there is one, else built in the
    /// background when due); `None` if `bytes` is not such an index of `dimensions`.
    pub(crate) fn read_from(
        bytes: &mut Reader<'_>,
        dimensions: usize,
        config: AnnConfig,
    ) -> Option<VectorIndex> {
        if bytes.u64()? != dimensions as u64 {
            return None;
        }
        let n = usize::try_from(bytes.u64()?).ok()?;
        let floats = n.checked_mul(dimensions)?;
        let ids: Vec<i64> = bytes
            .take(n.checked_mul(8)?)?
            .chunks_exact(8)
            .map(|c| i64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
            .collect();
        let all = bytes.take(floats.checked_add(2 * n)?.checked_mul(4)?)?;
        let mut all: Vec<f32> = all
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap_or([0; 4])))
            .collect();
        let errors = all.split_off(floats + n);
        let scales = all.split_off(floats);
        let codes: Vec<i8> = bytes
            .take(floats)?
            .iter()
            .map(|b| i8::from_le_bytes([*b]))
            .collect();
        let graph_len = usize::try_from(bytes.u64()?).ok()?;
        let graph = bytes.take(graph_len)?;
        let mut slots = HashMap::with_capacity(n);
        for (slot, id) in ids.iter().enumerate() {
            if slots.insert(*id, slot).is_some() {
                return None;
            }
        }
        if all
            .iter()
            .chain(&scales)
            .chain(&errors)
            .any(|x| !x.is_finite())
        {
            return None;
        }
        let mut index = VectorIndex {
            dimensions,
            data: all,
            codes,
            scales,
            errors,
            ids,
            slots,
            config: AnnConfig::disabled(),
            ann: None,
            pending: VecDeque::new(),
        };
        if graph_len > 0 && n >= config.min_entries {
            // A graph that does not hold exactly these rows is not used: it is rebuilt.
            index.ann = Ann::restore(dimensions, &config, graph).filter(|ann| ann.size() == n);
        }
        index.set_ann(config);
        Some(index)
    }
}

fn put_u64(out: &mut Vec<u8>, value: u64) {
    out.extend_from_slice(&value.to_le_bytes());
}

/// Reads a byte buffer front to back; every read is bounds-checked (`None` past the end).
pub(crate) struct Reader<'a>(pub(crate) &'a [u8]);

impl<'a> Reader<'a> {
    pub(crate) fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if n > self.0.len() {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }

    pub(crate) fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }

    pub(crate) fn i64(&mut self) -> Option<i64> {
        Some(i64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
}
