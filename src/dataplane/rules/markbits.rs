//! Allocates mark bits out of the configured mark mask
//! (`IptablesMarkMask`), lowest bit first, as upstream's mark-bits manager
//! does: single bits for flags (accept, pass, scratch, ...) and numbered
//! values spread over the remaining bits.

/// Why an allocation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MarkBitsError {
    /// No free bit left in the mask.
    #[error("mark mask {mask:#x} ({name}) has no free bits left")]
    Exhausted {
        /// Allocator name.
        name: String,
        /// The mask.
        mask: u32,
    },
    /// A number does not fit in the remaining bits.
    #[error("{number} does not fit in mark mask {mask:#x} ({name})")]
    TooLarge {
        /// Allocator name.
        name: String,
        /// The mask.
        mask: u32,
        /// The number.
        number: u64,
    },
    /// A mark has bits outside the mask.
    #[error("mark {mark:#x} has bits outside mask {mask:#x}")]
    OutsideMask {
        /// The mark.
        mark: u32,
        /// The mask.
        mask: u32,
    },
}

/// A mark-bit allocator over one mask.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MarkBitsManager {
    name: String,
    mask: u32,
    allocated: u32,
}

impl MarkBitsManager {
    /// An allocator over `mask`.
    pub fn new(mask: u32, name: &str) -> Self {
        MarkBitsManager {
            name: name.into(),
            mask,
            allocated: 0,
        }
    }

    /// The full mask.
    pub fn mask(&self) -> u32 {
        self.mask
    }

    /// Bits of the mask not yet handed out.
    pub fn available_bits(&self) -> u32 {
        self.mask.count_ones() - self.allocated
    }

    fn nth_bit(&self, n: u32) -> Option<u32> {
        (0..32)
            .map(|s| 1u32 << s)
            .filter(|b| self.mask & b != 0)
            .nth(n as usize)
    }

    /// Allocates the next single bit.
    pub fn next_single_bit_mark(&mut self) -> Result<u32, MarkBitsError> {
        let bit = self
            .nth_bit(self.allocated)
            .ok_or_else(|| MarkBitsError::Exhausted {
                name: self.name.clone(),
                mask: self.mask,
            })?;
        self.allocated += 1;
        Ok(bit)
    }

    /// Allocates up to `size` bits as one block; returns the block and how
    /// many bits it got.
    pub fn next_block_bits_mark(&mut self, size: u32) -> (u32, u32) {
        let mut mark = 0;
        for got in 0..size {
            match self.next_single_bit_mark() {
                Ok(b) => mark |= b,
                Err(_) => return (mark, got),
            }
        }
        (mark, size)
    }

    /// Number of distinct values the free bits can hold (0 if none).
    pub fn free_number_of_marks(&self) -> u64 {
        match self.available_bits() {
            0 => 0,
            n => 1u64 << n,
        }
    }

    /// Spreads the bits of `n` over the mask's bits (lowest first).
    pub fn map_number_to_mark(&self, n: u64) -> Result<u32, MarkBitsError> {
        let mut mark = 0u32;
        let mut rest = n;
        let mut idx = 0u32;
        for shift in 0..32 {
            if rest == 0 {
                break;
            }
            let bit = 1u32 << shift;
            if self.mask & bit != 0 {
                if rest & (1 << idx) != 0 {
                    mark |= bit;
                    rest &= !(1 << idx);
                }
                idx += 1;
            }
        }
        if rest != 0 {
            return Err(MarkBitsError::TooLarge {
                name: self.name.clone(),
                mask: self.mask,
                number: n,
            });
        }
        Ok(mark)
    }

    /// Inverse of [`MarkBitsManager::map_number_to_mark`].
    pub fn map_mark_to_number(&self, mark: u32) -> Result<u64, MarkBitsError> {
        if mark & self.mask != mark {
            return Err(MarkBitsError::OutsideMask {
                mark,
                mask: self.mask,
            });
        }
        let mut n = 0u64;
        let mut idx = 0;
        for shift in 0..32 {
            let bit = 1u32 << shift;
            if self.mask & bit != 0 {
                if mark & bit != 0 {
                    n |= 1 << idx;
                }
                idx += 1;
            }
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocates_lowest_bits_first_and_runs_out() {
        let mut m = MarkBitsManager::new(0xffff_0000, "felix");
        assert_eq!(m.next_single_bit_mark().unwrap(), 0x1_0000);
        assert_eq!(m.next_single_bit_mark().unwrap(), 0x2_0000);
        assert_eq!(m.available_bits(), 14);
        let (block, got) = m.next_block_bits_mark(3);
        assert_eq!((block, got), (0x1c_0000, 3));
        let mut small = MarkBitsManager::new(0b101, "s");
        assert_eq!(small.next_single_bit_mark().unwrap(), 1);
        assert_eq!(small.next_single_bit_mark().unwrap(), 4);
        assert!(small.next_single_bit_mark().is_err());
        assert_eq!(small.free_number_of_marks(), 0);
    }

    #[test]
    fn number_mapping_round_trips() {
        let m = MarkBitsManager::new(0x0ff0_0f00, "ep");
        for n in [0u64, 1, 5, 200, 4095] {
            let mark = m.map_number_to_mark(n).unwrap();
            assert_eq!(mark & !m.mask(), 0);
            assert_eq!(m.map_mark_to_number(mark).unwrap(), n);
        }
        assert!(m.map_number_to_mark(1 << 12).is_err());
        assert!(m.map_mark_to_number(0x1).is_err());
    }
}
