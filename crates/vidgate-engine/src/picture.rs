//! YUV 4:2:0 pictures and the few drawing primitives the scenes need.
//!
//! Frames are drawn straight into the planes the H.264 encoder reads, so no per-frame RGB to YUV
//! conversion is paid. Colours are converted once, with BT.709 limited-range coefficients, which
//! is also what the encoder signals in the stream's VUI.

use openh264::formats::YUVSource;

/// One 8-bit plane whose stride equals its width.
#[derive(Clone, Debug)]
pub(crate) struct Plane {
    pub(crate) width: usize,
    pub(crate) height: usize,
    pub(crate) data: Vec<u8>,
}

impl Plane {
    pub(crate) fn new(width: usize, height: usize, value: u8) -> Self {
        Self {
            width,
            height,
            data: vec![value; width * height],
        }
    }

    pub(crate) fn row(&self, y: usize) -> &[u8] {
        &self.data[y * self.width..(y + 1) * self.width]
    }

    pub(crate) fn row_mut(&mut self, y: usize) -> &mut [u8] {
        &mut self.data[y * self.width..(y + 1) * self.width]
    }

    /// Fills the half-open span `[x_start, x_end)` of row `y`, clipped to the plane.
    pub(crate) fn fill_span(&mut self, y: i32, x_start: i32, x_end: i32, value: u8) {
        if y < 0 || y >= self.height as i32 {
            return;
        }
        let start = x_start.clamp(0, self.width as i32) as usize;
        let end = x_end.clamp(0, self.width as i32) as usize;
        if start < end {
            self.row_mut(y as usize)[start..end].fill(value);
        }
    }

    /// Samples `source` bilinearly into the whole of this plane. Output pixel `(x, y)` reads the
    /// source at `origin + (x, y) * step`, all in 16.16 fixed point; indices are clamped so that
    /// rounding can never read outside the source.
    ///
    /// Each output row is made in two passes: the two source rows are first blended vertically
    /// over the span the row needs (a straight loop the compiler vectorises), then that blend is
    /// sampled horizontally with precomputed positions and weights.
    pub(crate) fn sample_bilinear_from(
        &mut self,
        source: &Plane,
        origin_x: i64,
        origin_y: i64,
        step: i64,
    ) {
        let max_x = source.width.saturating_sub(2);
        let max_y = source.height.saturating_sub(2);
        let columns: Vec<(usize, u32)> = (0..self.width)
            .map(|x| {
                let position = (origin_x + x as i64 * step).max(0);
                let index = ((position >> 16) as usize).min(max_x);
                (index, ((position >> 8) & 0xFF) as u32)
            })
            .collect();
        let span_start = columns.first().map_or(0, |&(index, _)| index);
        let span_end = columns
            .last()
            .map_or(0, |&(index, _)| index + 2)
            .min(source.width);
        let mut blended_rows = vec![0u16; span_end - span_start];
        for y in 0..self.height {
            let position = (origin_y + y as i64 * step).max(0);
            let row_index = ((position >> 16) as usize).min(max_y);
            let weight_y = ((position >> 8) & 0xFF) as u16;
            let top = &source.row(row_index)[span_start..span_end];
            let bottom = &source.row((row_index + 1).min(source.height - 1))[span_start..span_end];
            for ((blended, &upper), &lower) in blended_rows.iter_mut().zip(top).zip(bottom) {
                *blended = u16::from(upper) * (256 - weight_y) + u16::from(lower) * weight_y;
            }
            for (pixel, &(index, weight_x)) in self.row_mut(y).iter_mut().zip(&columns) {
                let pair = &blended_rows[index - span_start..index - span_start + 2];
                let value = u32::from(pair[0]) * (256 - weight_x) + u32::from(pair[1]) * weight_x;
                *pixel = ((value + (1 << 15)) >> 16) as u8;
            }
        }
    }

    /// Copies `source` with its top-left corner at `(left, top)`, clipped to this plane.
    pub(crate) fn blit(&mut self, source: &Plane, left: i32, top: i32) {
        let x_start = left.max(0);
        let x_end = (left + source.width as i32).min(self.width as i32);
        if x_start >= x_end {
            return;
        }
        for source_y in 0..source.height {
            let y = top + source_y as i32;
            if y < 0 || y >= self.height as i32 {
                continue;
            }
            let source_row = source.row(source_y);
            let source_slice = &source_row[(x_start - left) as usize..(x_end - left) as usize];
            self.row_mut(y as usize)[x_start as usize..x_end as usize]
                .copy_from_slice(source_slice);
        }
    }

    /// Mixes `other` into this plane: `alpha` 0 keeps this plane, 256 gives `other`.
    pub(crate) fn blend_with(&mut self, other: &Plane, alpha: u32) {
        let keep = 256 - alpha;
        for (pixel, &incoming) in self.data.iter_mut().zip(&other.data) {
            *pixel = ((u32::from(*pixel) * keep + u32::from(incoming) * alpha + 128) >> 8) as u8;
        }
    }
}

/// A YUV 4:2:0 picture with even width and height.
#[derive(Clone, Debug)]
pub(crate) struct Picture {
    pub(crate) y: Plane,
    pub(crate) u: Plane,
    pub(crate) v: Plane,
}

impl Picture {
    pub(crate) fn new(width: usize, height: usize) -> Self {
        Self {
            y: Plane::new(width, height, 16),
            u: Plane::new(width / 2, height / 2, 128),
            v: Plane::new(width / 2, height / 2, 128),
        }
    }

    pub(crate) fn width(&self) -> usize {
        self.y.width
    }

    pub(crate) fn height(&self) -> usize {
        self.y.height
    }

    /// Converts packed RGB8 pixels (width and height even) into a picture; each chroma sample is
    /// the mean of its 2×2 block, which keeps edges of photographs clean.
    pub(crate) fn from_rgb8(rgb: &[u8], width: usize, height: usize) -> Self {
        let mut picture = Self::new(width, height);
        for y in 0..height {
            let rgb_row = &rgb[y * width * 3..(y + 1) * width * 3];
            for (pixel, out) in rgb_row.chunks_exact(3).zip(picture.y.row_mut(y)) {
                *out = Yuv::luma(pixel[0], pixel[1], pixel[2]);
            }
        }
        for chroma_y in 0..height / 2 {
            let upper = &rgb[2 * chroma_y * width * 3..(2 * chroma_y + 1) * width * 3];
            let lower = &rgb[(2 * chroma_y + 1) * width * 3..(2 * chroma_y + 2) * width * 3];
            for chroma_x in 0..width / 2 {
                let mut sums = [0u32; 3];
                for row in [upper, lower] {
                    for channel in 0..3 {
                        sums[channel] += u32::from(row[chroma_x * 6 + channel])
                            + u32::from(row[chroma_x * 6 + 3 + channel]);
                    }
                }
                let colour = Yuv::from_rgb(
                    ((sums[0] + 2) / 4) as u8,
                    ((sums[1] + 2) / 4) as u8,
                    ((sums[2] + 2) / 4) as u8,
                );
                picture.u.row_mut(chroma_y)[chroma_x] = colour.u;
                picture.v.row_mut(chroma_y)[chroma_x] = colour.v;
            }
        }
        picture
    }

    /// Fills a span of luma row `y` and, on even rows, the matching chroma span.
    pub(crate) fn fill_span(&mut self, y: i32, x_start: i32, x_end: i32, colour: Yuv) {
        self.y.fill_span(y, x_start, x_end, colour.y);
        if y & 1 == 0 {
            let chroma_y = y >> 1;
            let chroma_start = x_start.div_euclid(2);
            let chroma_end = (x_end + 1).div_euclid(2);
            self.u
                .fill_span(chroma_y, chroma_start, chroma_end, colour.u);
            self.v
                .fill_span(chroma_y, chroma_start, chroma_end, colour.v);
        }
    }

    /// Copies `source` with its top-left corner at `(left, top)`; both must be even so that the
    /// chroma planes line up.
    pub(crate) fn blit(&mut self, source: &Picture, left: i32, top: i32) {
        self.y.blit(&source.y, left, top);
        self.u.blit(&source.u, left / 2, top / 2);
        self.v.blit(&source.v, left / 2, top / 2);
    }

    pub(crate) fn blend_with(&mut self, other: &Picture, alpha: u32) {
        self.y.blend_with(&other.y, alpha);
        self.u.blend_with(&other.u, alpha);
        self.v.blend_with(&other.v, alpha);
    }

    /// Darkens rows `[top, bottom)` towards black and pulls their colour towards grey, giving
    /// captions a calm band to sit on whatever is behind them.
    pub(crate) fn darken_rows(&mut self, top: usize, bottom: usize) {
        let bottom = bottom.min(self.height());
        for y in top.min(bottom)..bottom {
            for pixel in self.y.row_mut(y) {
                *pixel = (16 + u32::from(*pixel).saturating_sub(16) * 2 / 5) as u8;
            }
        }
        for chroma_y in top.div_ceil(2).min(bottom / 2)..bottom / 2 {
            for plane in [&mut self.u, &mut self.v] {
                for pixel in plane.row_mut(chroma_y) {
                    *pixel = ((u32::from(*pixel) + 3 * 128) / 4) as u8;
                }
            }
        }
    }
}

impl YUVSource for Picture {
    fn dimensions(&self) -> (usize, usize) {
        (self.y.width, self.y.height)
    }

    fn strides(&self) -> (usize, usize, usize) {
        (self.y.width, self.u.width, self.v.width)
    }

    fn y(&self) -> &[u8] {
        &self.y.data
    }

    fn u(&self) -> &[u8] {
        &self.u.data
    }

    fn v(&self) -> &[u8] {
        &self.v.data
    }
}

/// A colour in BT.709 limited-range YUV.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Yuv {
    pub(crate) y: u8,
    pub(crate) u: u8,
    pub(crate) v: u8,
}

impl Yuv {
    pub(crate) const WHITE: Yuv = Yuv {
        y: 235,
        u: 128,
        v: 128,
    };
    pub(crate) const BLACK: Yuv = Yuv {
        y: 16,
        u: 128,
        v: 128,
    };

    /// BT.709 luma in limited range, in 8.8 fixed point (coefficients scaled by 219/255).
    pub(crate) fn luma(red: u8, green: u8, blue: u8) -> u8 {
        let (red, green, blue) = (i32::from(red), i32::from(green), i32::from(blue));
        (16 + ((47 * red + 157 * green + 16 * blue + 128) >> 8)) as u8
    }

    pub(crate) fn from_rgb(red: u8, green: u8, blue: u8) -> Self {
        let (r, g, b) = (i32::from(red), i32::from(green), i32::from(blue));
        let u = 128 + ((-26 * r - 87 * g + 113 * b + 128) >> 8);
        let v = 128 + ((113 * r - 103 * g - 10 * b + 128) >> 8);
        Self {
            y: Self::luma(red, green, blue),
            u: u.clamp(16, 240) as u8,
            v: v.clamp(16, 240) as u8,
        }
    }

    /// Converts hue (turns, any value), saturation and value (both `0..=1`) to YUV.
    pub(crate) fn from_hsv(hue: f32, saturation: f32, value: f32) -> Self {
        let hue = hue.rem_euclid(1.0) * 6.0;
        let sector = hue.floor();
        let fraction = hue - sector;
        let saturation = saturation.clamp(0.0, 1.0);
        let value = value.clamp(0.0, 1.0);
        let p = value * (1.0 - saturation);
        let q = value * (1.0 - saturation * fraction);
        let t = value * (1.0 - saturation * (1.0 - fraction));
        let (r, g, b) = match sector as u32 {
            0 => (value, t, p),
            1 => (q, value, p),
            2 => (p, value, t),
            3 => (p, q, value),
            4 => (t, p, value),
            _ => (value, p, q),
        };
        let to_byte = |channel: f32| (channel * 255.0).round() as u8;
        Self::from_rgb(to_byte(r), to_byte(g), to_byte(b))
    }

    /// Linear mix: `weight` 0 gives `self`, 256 gives `other`.
    pub(crate) fn mix(self, other: Yuv, weight: u32) -> Yuv {
        let keep = 256 - weight;
        let channel =
            |a: u8, b: u8| ((u32::from(a) * keep + u32::from(b) * weight + 128) >> 8) as u8;
        Yuv {
            y: channel(self.y, other.y),
            u: channel(self.u, other.u),
            v: channel(self.v, other.v),
        }
    }
}
