//! Sorting more than the audit should hold in memory: items are gathered up to a byte budget,
//! sorted, and written to an anonymous temporary file as a sorted run when the budget is
//! reached; reading them back merges the runs. A window that fits the budget never touches the
//! disk.
//!
//! The audit's memory is therefore the budget of the sorter being filled plus a buffered reader
//! for each of at most [`MAX_RUNS`] runs (more are merged into one), whatever the window.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Seek, Write};

/// What a sorter sorts: ordered, sized, and written to and read from a run.
pub(crate) trait Item: Ord + Sized {
    /// Bytes its heap allocations take (an estimate is enough: see [`heap`]).
    fn size(&self) -> usize;
    fn write(&self, w: &mut impl Write) -> io::Result<()>;
    /// The next item of a run; `None` at its end.
    fn read(r: &mut impl Read) -> io::Result<Option<Self>>;
}

/// Gathers items; [`Sorter::sorted`] hands them back in order.
pub(crate) struct Sorter<T: Item> {
    buffer: Vec<T>,
    bytes: usize,
    budget: usize,
    runs: Vec<File>,
    len: u64,
}

impl<T: Item> Sorter<T> {
    pub fn new(budget: usize) -> Sorter<T> {
        Sorter { buffer: Vec::new(), bytes: 0, budget, runs: Vec::new(), len: 0 }
    }

    /// Adds `item`. The budget counts what the buffer really takes: its capacity (a `Vec`
    /// doubles when full, so a buffer that would outgrow the budget by growing is spilled
    /// instead) and each item's heap.
    pub fn push(&mut self, item: T) -> io::Result<()> {
        let each = std::mem::size_of::<T>();
        let (len, capacity) = (self.buffer.len(), self.buffer.capacity());
        if len > 0 && len == capacity && self.bytes + 2 * capacity * each > self.budget {
            self.spill()?;
        }
        if self.buffer.capacity() == 0 {
            self.buffer.reserve((self.budget / 4 / each.max(1)).clamp(1, 1024));
        }
        self.bytes += item.size();
        self.buffer.push(item);
        self.len += 1;
        if self.bytes + self.buffer.capacity() * each >= self.budget {
            self.spill()?;
        }
        Ok(())
    }

    /// Items pushed so far.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Runs written to disk so far.
    #[cfg(test)]
    pub fn runs(&self) -> usize {
        self.runs.len()
    }

    fn spill(&mut self) -> io::Result<()> {
        self.buffer.sort_unstable();
        let mut w = BufWriter::with_capacity(1 << 16, tempfile::tempfile()?);
        for item in self.buffer.drain(..) {
            item.write(&mut w)?;
        }
        self.runs.push(finish(w)?);
        self.buffer = Vec::new();
        self.bytes = 0;
        if self.runs.len() >= MAX_RUNS {
            // Merged into one, so that a window of any size keeps a few files open.
            let mut w = BufWriter::with_capacity(1 << 16, tempfile::tempfile()?);
            for item in merge::<T>(std::mem::take(&mut self.runs))? {
                item?.write(&mut w)?;
            }
            self.runs.push(finish(w)?);
        }
        Ok(())
    }

    /// Every item, in order.
    pub fn sorted(mut self) -> io::Result<Sorted<T>> {
        if self.runs.is_empty() {
            self.buffer.sort_unstable();
            return Ok(Sorted::Memory(self.buffer.into_iter()));
        }
        if !self.buffer.is_empty() {
            self.spill()?;
        }
        merge(self.runs)
    }
}

/// Runs merged past this many: each holds a file and a read buffer.
const MAX_RUNS: usize = 32;

fn finish(w: BufWriter<File>) -> io::Result<File> {
    let mut file = w.into_inner().map_err(|e| e.into_error())?;
    file.rewind()?;
    Ok(file)
}

/// The items of sorted `runs`, in order.
fn merge<T: Item>(runs: Vec<File>) -> io::Result<Sorted<T>> {
    let mut readers: Vec<BufReader<File>> =
        runs.into_iter().map(|f| BufReader::with_capacity(1 << 15, f)).collect();
    let mut heads = BinaryHeap::with_capacity(readers.len());
    for (i, r) in readers.iter_mut().enumerate() {
        if let Some(item) = T::read(r)? {
            heads.push(Reverse((item, i)));
        }
    }
    Ok(Sorted::Runs { readers, heads })
}

/// The items of a [`Sorter`], in order.
pub(crate) enum Sorted<T: Item> {
    Memory(std::vec::IntoIter<T>),
    Runs { readers: Vec<BufReader<File>>, heads: BinaryHeap<Reverse<(T, usize)>> },
}

impl<T: Item> Iterator for Sorted<T> {
    type Item = io::Result<T>;

    fn next(&mut self) -> Option<io::Result<T>> {
        match self {
            Sorted::Memory(items) => items.next().map(Ok),
            Sorted::Runs { readers, heads } => {
                let Reverse((item, i)) = heads.pop()?;
                match T::read(&mut readers[i]) {
                    Ok(Some(next)) => heads.push(Reverse((next, i))),
                    Ok(None) => {}
                    Err(e) => return Some(Err(e)),
                }
                Some(Ok(item))
            }
        }
    }
}

/// An I/O error of the sorters' temporary files, as the audit reports it.
pub(crate) fn failed(e: io::Error) -> crate::error::Error {
    crate::error::Error::definite_with(
        "the audit cannot use its temporary files",
        "give the audit a writable temporary directory with room for the window (TMPDIR)",
        e,
    )
}

/// What an allocation of `capacity` bytes takes from the allocator (glibc: 16-byte chunks with
/// a word of header); nothing for none.
pub(crate) fn heap(capacity: usize) -> usize {
    match capacity {
        0 => 0,
        n => (n + 8).div_ceil(16) * 16,
    }
}

/// Writes a length-prefixed byte string.
pub(crate) fn write_bytes(w: &mut impl Write, b: &[u8]) -> io::Result<()> {
    w.write_all(&(b.len() as u32).to_le_bytes())?;
    w.write_all(b)
}

/// Reads a byte string [`write_bytes`] wrote; `None` at a clean end of the run.
pub(crate) fn read_bytes(r: &mut impl Read) -> io::Result<Option<Vec<u8>>> {
    let mut len = [0u8; 4];
    match r.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let mut b = vec![0u8; u32::from_le_bytes(len) as usize];
    r.read_exact(&mut b)?;
    Ok(Some(b))
}

pub(crate) fn write_i64(w: &mut impl Write, v: i64) -> io::Result<()> {
    w.write_all(&v.to_le_bytes())
}

pub(crate) fn read_i64(r: &mut impl Read) -> io::Result<i64> {
    let mut b = [0u8; 8];
    r.read_exact(&mut b)?;
    Ok(i64::from_le_bytes(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
    struct Word(Vec<u8>, i64);

    impl Item for Word {
        fn size(&self) -> usize {
            self.0.len()
        }
        fn write(&self, w: &mut impl Write) -> io::Result<()> {
            write_bytes(w, &self.0)?;
            write_i64(w, self.1)
        }
        fn read(r: &mut impl Read) -> io::Result<Option<Self>> {
            let Some(b) = read_bytes(r)? else { return Ok(None) };
            Ok(Some(Word(b, read_i64(r)?)))
        }
    }

    fn words(n: i64) -> Vec<Word> {
        // A fixed shuffle: 7919 is prime, so i * 7919 mod n visits every i once.
        (0..n).map(|i| (i * 7919) % n).map(|v| Word(format!("w{v:06}").into_bytes(), v)).collect()
    }

    #[test]
    fn spill_sorts_what_fits_in_memory_without_a_run() {
        let mut s = Sorter::new(1 << 20);
        for w in words(1_000) {
            s.push(w).unwrap();
        }
        assert_eq!(s.runs(), 0);
        let out: Vec<i64> = s.sorted().unwrap().map(|w| w.unwrap().1).collect();
        assert_eq!(out, (0..1_000).collect::<Vec<_>>());
    }

    #[test]
    fn spill_merges_runs_written_to_disk_in_order_and_loses_none() {
        let mut s = Sorter::new(4_096);
        for w in words(10_000) {
            s.push(w).unwrap();
        }
        assert!((1..=MAX_RUNS).contains(&s.runs()), "runs: {}", s.runs());
        assert_eq!(s.len(), 10_000);
        let out: Vec<i64> = s.sorted().unwrap().map(|w| w.unwrap().1).collect();
        assert_eq!(out, (0..10_000).collect::<Vec<_>>());
    }
}
