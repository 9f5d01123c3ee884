//! The picture side of a clip: a scene description derived once from the request, and a pure
//! function from frame index to frame, so that frames can be drawn in any order on any thread.

use image::RgbImage;

use crate::RenderRequest;
use crate::images;
use crate::mood::Mood;
use crate::numbers::{SplitMix64, ease, sin_turns};
use crate::picture::{Picture, Yuv};
use crate::text;

/// Source images for pan and zoom are prepared this much larger than the cover fit, so that the
/// window can zoom in by up to this factor without upscaling at draw time.
const PAN_ZOOM_HEADROOM: f32 = 1.15;
/// How far the pan-and-zoom moves in at most (a factor of the cover fit).
const PAN_ZOOM_DEPTH: f32 = 1.12;
/// At most this many reference images join the collage; more would be too small to see.
const MAX_COLLAGE_TILES: usize = 6;
/// Caption characters revealed per second (a typewriter effect that shows the clip is moving).
const CAPTION_CHARACTERS_PER_SECOND: f32 = 40.0;
const ENGINE_TAG: &str = "LOCAL ENGINE \u{b7} PROCEDURAL RENDER";

#[derive(Clone, Copy, Debug)]
enum ShapeKind {
    Disc,
    Ring,
    Diamond,
    Square,
    Bar,
}

/// A sine path: `centre + amplitude * sin(frequency * t + phase)` per axis, in frame fractions.
#[derive(Clone, Copy, Debug)]
struct Path {
    amplitude: (f32, f32),
    frequency: (f32, f32),
    phase: (f32, f32),
}

impl Path {
    fn random(random: &mut SplitMix64, reach: (f32, f32), speed: f32) -> Self {
        Self {
            amplitude: (
                reach.0 * random.range_f32(0.5, 1.0),
                reach.1 * random.range_f32(0.5, 1.0),
            ),
            frequency: (
                random.range_f32(0.04, 0.16) * speed,
                random.range_f32(0.04, 0.16) * speed,
            ),
            phase: (random.unit(), random.unit()),
        }
    }

    /// The position at `seconds`, as fractions of the frame (0.5 is the centre).
    fn at(&self, seconds: f32) -> (f32, f32) {
        (
            0.5 + self.amplitude.0 * sin_turns(self.frequency.0 * seconds + self.phase.0),
            0.5 + self.amplitude.1 * sin_turns(self.frequency.1 * seconds + self.phase.1),
        )
    }
}

#[derive(Clone, Debug)]
struct Shape {
    kind: ShapeKind,
    colour: Yuv,
    /// Radius as a fraction of the frame's shorter side.
    radius: f32,
    pulse_frequency: f32,
    pulse_phase: f32,
    path: Path,
}

/// An image shown with slow pan and zoom (the "Ken Burns" effect).
#[derive(Clone, Debug)]
struct PanZoom {
    source: Picture,
    zoom_from: f32,
    zoom_to: f32,
    pan_from: (f32, f32),
    pan_to: (f32, f32),
}

impl PanZoom {
    fn draw(&self, fraction: f32, out: &mut Picture) {
        let eased = ease(fraction);
        let zoom = self.zoom_from + (self.zoom_to - self.zoom_from) * eased;
        let pan_x = self.pan_from.0 + (self.pan_to.0 - self.pan_from.0) * eased;
        let pan_y = self.pan_from.1 + (self.pan_to.1 - self.pan_from.1) * eased;
        // Source pixels per output pixel; the window it implies always fits in the source
        // because the source was prepared `PAN_ZOOM_HEADROOM` larger than the cover fit.
        let step = PAN_ZOOM_HEADROOM / zoom;
        let spare_x = (self.source.width() as f32 - 1.0 - out.width() as f32 * step).max(0.0);
        let spare_y = (self.source.height() as f32 - 1.0 - out.height() as f32 * step).max(0.0);
        let origin_x = pan_x * spare_x;
        let origin_y = pan_y * spare_y;
        let fixed = |value: f32| (value * 65536.0).round() as i64;
        let step_fixed = fixed(step);
        out.y
            .sample_bilinear_from(&self.source.y, fixed(origin_x), fixed(origin_y), step_fixed);
        out.u.sample_bilinear_from(
            &self.source.u,
            fixed(origin_x / 2.0),
            fixed(origin_y / 2.0),
            step_fixed,
        );
        out.v.sample_bilinear_from(
            &self.source.v,
            fixed(origin_x / 2.0),
            fixed(origin_y / 2.0),
            step_fixed,
        );
    }
}

/// A reference image moving across the frame as part of a collage.
#[derive(Clone, Debug)]
struct Tile {
    picture: Picture,
    path: Path,
}

#[derive(Clone, Debug)]
struct Caption {
    lines: Vec<Vec<char>>,
    scale: i32,
}

/// Everything needed to draw any frame of the clip.
#[derive(Clone, Debug)]
pub(crate) struct Scene {
    width: u32,
    height: u32,
    fps: u32,
    frame_count: u32,
    mood: Mood,
    hue_drift_per_second: f32,
    shapes: Vec<Shape>,
    opening: Option<PanZoom>,
    closing: Option<PanZoom>,
    /// Frames over which the closing image fades in, ending on the last frame.
    closing_fade_frames: u32,
    tiles: Vec<Tile>,
    caption: Option<Caption>,
    tag: Vec<char>,
    tag_scale: i32,
}

/// The images of a request, decoded.
pub(crate) struct DecodedImages {
    pub(crate) opening: Option<RgbImage>,
    pub(crate) closing: Option<RgbImage>,
    pub(crate) references: Vec<RgbImage>,
}

impl Scene {
    pub(crate) fn new(request: &RenderRequest, mood: Mood, decoded: DecodedImages) -> Self {
        let mut random = SplitMix64::new(mood.variation_seed ^ 0x5CE9_E000);
        let (width, height) = (request.width, request.height);
        let frame_count = request.duration_s * request.fps;
        let shorter_side = width.min(height) as f32;

        let shape_count = 4 + random.below(5);
        let shapes = (0..shape_count)
            .map(|_| {
                let kind = match random.below(9) {
                    0..=2 => ShapeKind::Disc,
                    3 | 4 => ShapeKind::Ring,
                    5 | 6 => ShapeKind::Diamond,
                    7 => ShapeKind::Square,
                    _ => ShapeKind::Bar,
                };
                // Shapes take the palette's hues, with enough contrast to the background.
                let hue = mood.hue + mood.hue_spread * random.range_f32(-1.5, 2.5);
                let value = (mood.brightness + random.range_f32(0.05, 0.3)).min(1.0);
                Shape {
                    kind,
                    colour: Yuv::from_hsv(hue, random.range_f32(0.45, 0.95), value),
                    radius: random.range_f32(0.04, 0.15),
                    pulse_frequency: random.range_f32(0.2, 0.6) * mood.speed,
                    pulse_phase: random.unit(),
                    path: Path::random(&mut random, (0.42, 0.4), mood.speed),
                }
            })
            .collect();

        let opening = decoded.opening.map(|image| PanZoom {
            source: images::prepare_cover(&image, width, height, PAN_ZOOM_HEADROOM),
            // The clip opens on the whole fitted image, then moves in towards a random point.
            zoom_from: 1.0,
            zoom_to: PAN_ZOOM_DEPTH,
            pan_from: (0.5, 0.5),
            pan_to: (random.range_f32(0.2, 0.8), random.range_f32(0.2, 0.8)),
        });
        let closing = decoded.closing.map(|image| PanZoom {
            source: images::prepare_cover(&image, width, height, PAN_ZOOM_HEADROOM),
            // The closing image settles on its whole fitted view on the last frame.
            zoom_from: PAN_ZOOM_DEPTH,
            zoom_to: 1.0,
            pan_from: (random.range_f32(0.2, 0.8), random.range_f32(0.2, 0.8)),
            pan_to: (0.5, 0.5),
        });
        let closing_fade_frames = (frame_count / 3).clamp(1, request.fps.max(1));

        let used_references = decoded.references.len().min(MAX_COLLAGE_TILES);
        let tile_fraction = match used_references {
            1 => 0.6,
            2 => 0.5,
            3 | 4 => 0.4,
            _ => 0.33,
        };
        let tile_side = (shorter_side * tile_fraction) as u32;
        let border = (shorter_side / 240.0).ceil() as usize * 2;
        let tiles = decoded.references[..used_references]
            .iter()
            .map(|image| {
                let picture = framed(images::prepare_contain(image, tile_side), border);
                let reach = (
                    (0.5 - picture.width() as f32 / width as f32 / 2.0).max(0.0) * 0.9,
                    (0.5 - picture.height() as f32 / height as f32 / 2.0).max(0.0) * 0.9,
                );
                Tile {
                    picture,
                    path: Path::random(&mut random, reach, mood.speed),
                }
            })
            .collect();

        let scale = (shorter_side / 135.0).max(2.0) as i32;
        let margin = 3 * scale * 2;
        let max_columns = ((width as i32 - 2 * margin) / (8 * scale)).max(4) as usize;
        let max_lines = if height > width { 4 } else { 3 };
        let lines = text::wrap(&request.prompt, max_columns, max_lines);
        let caption = (!lines.is_empty()).then_some(Caption { lines, scale });

        Self {
            width,
            height,
            fps: request.fps,
            frame_count,
            hue_drift_per_second: random.range_f32(0.004, 0.012) * mood.speed,
            mood,
            shapes,
            opening,
            closing,
            closing_fade_frames,
            tiles,
            caption,
            tag: ENGINE_TAG.chars().collect(),
            tag_scale: (scale / 2).max(1),
        }
    }

    pub(crate) fn frame_count(&self) -> u32 {
        self.frame_count
    }

    /// A picture of the right size to pass to [`Scene::draw_frame`].
    pub(crate) fn new_picture(&self) -> Picture {
        Picture::new(self.width as usize, self.height as usize)
    }

    /// Draws frame `index` into `out`; `scratch` is working space of the same size. The result
    /// depends only on the scene and the index.
    pub(crate) fn draw_frame(&self, index: u32, out: &mut Picture, scratch: &mut Picture) {
        let seconds = index as f32 / self.fps as f32;
        let fraction = index as f32 / (self.frame_count.max(2) - 1) as f32;
        match &self.opening {
            Some(opening) => opening.draw(fraction, out),
            None => {
                self.draw_background(seconds, out);
                self.draw_shapes(seconds, out);
            }
        }
        for tile in &self.tiles {
            let (x, y) = tile.path.at(seconds);
            let left = (x * self.width as f32) as i32 - tile.picture.width() as i32 / 2;
            let top = (y * self.height as f32) as i32 - tile.picture.height() as i32 / 2;
            out.blit(&tile.picture, left & !1, top & !1);
        }
        if let Some(closing) = &self.closing {
            let fade_start = self.frame_count - self.closing_fade_frames;
            if index >= fade_start {
                closing.draw(fraction, scratch);
                let alpha = (index - fade_start + 1) * 256 / self.closing_fade_frames;
                out.blend_with(scratch, alpha.min(256));
            }
        }
        self.draw_caption(seconds, out);
        self.draw_tag(out);
    }

    fn draw_background(&self, seconds: f32, out: &mut Picture) {
        let hue = self.mood.hue + self.hue_drift_per_second * seconds;
        let top = Yuv::from_hsv(hue, 0.75, self.mood.brightness * 0.55);
        let bottom = Yuv::from_hsv(
            hue + self.mood.hue_spread,
            0.85,
            self.mood.brightness * 0.25,
        );
        let height = self.height as i32;
        for y in 0..height {
            let weight = (y as u32 * 256) / self.height;
            out.fill_span(y, 0, self.width as i32, top.mix(bottom, weight));
        }
    }

    fn draw_shapes(&self, seconds: f32, out: &mut Picture) {
        let shorter_side = self.width.min(self.height) as f32;
        for shape in &self.shapes {
            let (x, y) = shape.path.at(seconds);
            let centre_x = (x * self.width as f32) as i32;
            let centre_y = (y * self.height as f32) as i32;
            let pulse = 1.0 + 0.15 * sin_turns(shape.pulse_frequency * seconds + shape.pulse_phase);
            let radius = ((shape.radius * shorter_side * pulse) as i32).max(2);
            match shape.kind {
                ShapeKind::Bar => {
                    let half = radius / 3;
                    for row in centre_y - half..=centre_y + half {
                        out.fill_span(row, 0, self.width as i32, shape.colour);
                    }
                }
                ShapeKind::Ring => {
                    let inner = radius * 2 / 3;
                    for offset in -radius..=radius {
                        let outer_half = integer_sqrt(radius * radius - offset * offset);
                        let row = centre_y + offset;
                        if offset.abs() < inner {
                            let inner_half = integer_sqrt(inner * inner - offset * offset);
                            out.fill_span(
                                row,
                                centre_x - outer_half,
                                centre_x - inner_half,
                                shape.colour,
                            );
                            out.fill_span(
                                row,
                                centre_x + inner_half,
                                centre_x + outer_half + 1,
                                shape.colour,
                            );
                        } else {
                            out.fill_span(
                                row,
                                centre_x - outer_half,
                                centre_x + outer_half + 1,
                                shape.colour,
                            );
                        }
                    }
                }
                ShapeKind::Disc | ShapeKind::Diamond | ShapeKind::Square => {
                    for offset in -radius..=radius {
                        let half = match shape.kind {
                            ShapeKind::Disc => integer_sqrt(radius * radius - offset * offset),
                            ShapeKind::Diamond => radius - offset.abs(),
                            _ => radius * 4 / 5,
                        };
                        let row = centre_y + offset;
                        out.fill_span(row, centre_x - half, centre_x + half + 1, shape.colour);
                    }
                }
            }
        }
    }

    fn draw_caption(&self, seconds: f32, out: &mut Picture) {
        let Some(caption) = &self.caption else { return };
        let scale = caption.scale;
        let line_height = 10 * scale;
        let padding = 2 * scale;
        let band_height = caption.lines.len() as i32 * line_height + 2 * padding;
        let band_top = (self.height as i32 - band_height - 4 * scale).max(0) & !1;
        out.darken_rows(band_top as usize, (band_top + band_height) as usize);
        let mut visible = (seconds * CAPTION_CHARACTERS_PER_SECOND) as usize + 1;
        for (line_index, line) in caption.lines.iter().enumerate() {
            let text_width = line.len() as i32 * 8 * scale;
            let left = (self.width as i32 - text_width) / 2;
            let top = band_top + padding + line_index as i32 * line_height + scale;
            text::draw_line(out, line, left, top, scale, Yuv::WHITE, visible);
            visible = visible.saturating_sub(line.len());
        }
    }

    fn draw_tag(&self, out: &mut Picture) {
        let scale = self.tag_scale;
        let margin = 4 * scale;
        let grey = Yuv {
            y: 200,
            u: 128,
            v: 128,
        };
        text::draw_line(
            out,
            &self.tag,
            margin + scale,
            margin + scale,
            scale,
            Yuv::BLACK,
            usize::MAX,
        );
        text::draw_line(out, &self.tag, margin, margin, scale, grey, usize::MAX);
    }
}

/// Surrounds `picture` with a white frame `border` pixels wide (`border` even).
fn framed(picture: Picture, border: usize) -> Picture {
    let mut framed = Picture::new(picture.width() + 2 * border, picture.height() + 2 * border);
    for plane_row in 0..framed.height() as i32 {
        framed.fill_span(plane_row, 0, framed.width() as i32, Yuv::WHITE);
    }
    framed.blit(&picture, border as i32, border as i32);
    framed
}

fn integer_sqrt(value: i32) -> i32 {
    if value <= 0 {
        return 0;
    }
    let mut root = (value as f32).sqrt() as i32;
    while root * root > value {
        root -= 1;
    }
    while (root + 1) * (root + 1) <= value {
        root += 1;
    }
    root
}
