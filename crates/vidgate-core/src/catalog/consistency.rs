//! The rules `Catalog::from_json` holds every model of a catalog to: each
//! exists because validation or pricing looks something up and must find
//! it, so a replacement catalog that breaks one is refused before anything
//! uses it.

use std::collections::BTreeSet;

use super::{BASE_ASPECT_RATIO, MediaKind, Mode, Model, Parameter, ParameterType};
use crate::validation;

impl Model {
    /// Everything `from_json` guarantees about one model. Each rule exists
    /// because validation or pricing looks something up and must find it.
    pub(super) fn check(&self) -> Result<(), String> {
        let mut id_parts = self.id.split('/');
        if !matches!((id_parts.next(), id_parts.next(), id_parts.next()), (Some(vendor), Some(model), None) if !vendor.is_empty() && !model.is_empty())
        {
            return Err("the id must have the form vendor/model".to_owned());
        }
        if self.modes.is_empty() {
            return Err("the model offers no mode".to_owned());
        }
        if self.modes.iter().collect::<BTreeSet<_>>().len() != self.modes.len() {
            return Err("a mode is listed twice".to_owned());
        }
        let mut names = BTreeSet::new();
        for parameter in &self.parameters {
            if !names.insert(parameter.name.as_str()) {
                return Err(format!("parameter {} is defined twice", parameter.name));
            }
            self.check_parameter(parameter)
                .map_err(|problem| format!("parameter {}: {problem}", parameter.name))?;
        }
        for &mode in &self.modes {
            self.check_mode(mode)
                .map_err(|problem| format!("mode {mode}: {problem}"))?;
        }
        let mut frame_keys = BTreeSet::new();
        for frame in &self.frames {
            if !frame_keys.insert((&frame.resolution, &frame.aspect_ratio)) {
                return Err(format!(
                    "frame {} {} is listed twice",
                    frame.resolution, frame.aspect_ratio
                ));
            }
            if frame.width == 0
                || frame.height == 0
                || frame.width % 2 != 0
                || frame.height % 2 != 0
            {
                return Err(format!(
                    "frame {} {} must have positive even sides, not {}x{}",
                    frame.resolution, frame.aspect_ratio, frame.width, frame.height
                ));
            }
        }
        self.pricing.check(self)
    }

    fn check_parameter(&self, parameter: &Parameter) -> Result<(), String> {
        self.check_modes_of(parameter)?;
        check_fields_fit_the_type(parameter)?;
        check_bounds(parameter)?;
        self.check_requires_any_of(parameter)?;
        check_default(parameter)?;
        check_what_the_service_relies_on(parameter)
    }

    /// A parameter belongs to modes the model offers, and is required only
    /// where it is accepted.
    fn check_modes_of(&self, parameter: &Parameter) -> Result<(), String> {
        if parameter.modes.is_empty() {
            return Err("it belongs to no mode".to_owned());
        }
        if let Some(mode) = parameter
            .modes
            .iter()
            .find(|mode| !self.modes.contains(mode))
        {
            return Err(format!(
                "it names mode {mode}, which the model does not offer"
            ));
        }
        if let Some(mode) = parameter
            .required_in
            .iter()
            .find(|mode| !parameter.modes.contains(mode))
        {
            return Err(format!(
                "it is required in mode {mode}, where it is not accepted"
            ));
        }
        Ok(())
    }

    /// The list's prerequisites are lists of the same model.
    fn check_requires_any_of(&self, parameter: &Parameter) -> Result<(), String> {
        for other in &parameter.requires_any_of {
            let Some(other_parameter) = self.parameter(other) else {
                return Err(format!("requires_any_of names unknown parameter {other}"));
            };
            if other_parameter.parameter_type != ParameterType::UriArray {
                return Err(format!(
                    "requires_any_of names {other}, which is not a list"
                ));
            }
        }
        Ok(())
    }

    /// Every combination of resolution and aspect ratio a mode can produce
    /// must have a frame, and every mode needs a duration to price.
    fn check_mode(&self, mode: Mode) -> Result<(), String> {
        let duration = self
            .parameter("duration")
            .filter(|parameter| parameter.accepted_in(mode));
        let Some(duration) = duration else {
            return Err("it has no duration parameter, so it cannot be priced".to_owned());
        };
        if duration.default.is_none() {
            return Err("its duration needs a default, so that a quote can be priced".to_owned());
        }
        for resolution in self.resolutions(mode)? {
            for aspect_ratio in self.aspect_ratios(mode) {
                if self.frame(&resolution, &aspect_ratio).is_none() {
                    return Err(format!("there is no frame for {resolution} {aspect_ratio}"));
                }
            }
        }
        Ok(())
    }

    /// The resolutions a mode can produce.
    pub(crate) fn resolutions(&self, mode: Mode) -> Result<Vec<String>, String> {
        let parameter = self
            .parameter("resolution")
            .filter(|parameter| parameter.accepted_in(mode));
        match (parameter, &self.output_resolution) {
            (Some(parameter), _) => {
                if parameter.default.is_none() {
                    return Err("its resolution needs a default".to_owned());
                }
                Ok(string_values(parameter))
            }
            (None, Some(resolution)) => Ok(vec![resolution.clone()]),
            (None, None) => {
                Err("it has no resolution parameter and the model no output_resolution".to_owned())
            }
        }
    }

    /// The aspect ratios a mode can produce.
    fn aspect_ratios(&self, mode: Mode) -> Vec<String> {
        match self
            .parameter("aspect_ratio")
            .filter(|parameter| parameter.accepted_in(mode))
        {
            Some(parameter) => string_values(parameter),
            None => vec![BASE_ASPECT_RATIO.to_owned()],
        }
    }
}

fn string_values(parameter: &Parameter) -> Vec<String> {
    parameter
        .allowed_values
        .iter()
        .flatten()
        .filter_map(|value| value.as_str().map(str::to_owned))
        .collect()
}

/// Each field of a parameter applies to its type (an `enum` to text or
/// integers, `max_items` to lists, …).
fn check_fields_fit_the_type(parameter: &Parameter) -> Result<(), String> {
    let is_text = parameter.parameter_type == ParameterType::String;
    let is_integer = parameter.parameter_type == ParameterType::Integer;
    let is_array = parameter.parameter_type == ParameterType::UriArray;
    let is_uri = matches!(
        parameter.parameter_type,
        ParameterType::Uri | ParameterType::UriArray
    );
    let misplaced = [
        (
            "enum",
            parameter.allowed_values.is_some() && !is_text && !is_integer,
        ),
        (
            "minimum or maximum",
            (parameter.minimum.is_some() || parameter.maximum.is_some()) && !is_integer,
        ),
        (
            "min_length or max_length",
            (parameter.min_length.is_some() || parameter.max_length.is_some()) && !is_text,
        ),
        ("max_items", parameter.max_items.is_some() && !is_array),
        (
            "requires_any_of",
            !parameter.requires_any_of.is_empty() && !is_array,
        ),
        (
            "reject_credentials",
            parameter.reject_credentials && !is_uri,
        ),
        ("media", parameter.media.is_some() && !is_uri),
    ];
    if let Some((field, _)) = misplaced.iter().find(|(_, misplaced)| *misplaced) {
        return Err(format!("{field} does not apply to its type"));
    }
    Ok(())
}

/// An enum is not empty and of the parameter's type; a minimum is not
/// above its maximum.
fn check_bounds(parameter: &Parameter) -> Result<(), String> {
    let is_text = parameter.parameter_type == ParameterType::String;
    if let Some(allowed) = &parameter.allowed_values {
        if allowed.is_empty() {
            return Err("its enum is empty".to_owned());
        }
        let right_kind = allowed.iter().all(|value| {
            if is_text {
                value.is_string()
            } else {
                value.as_i64().is_some()
            }
        });
        if !right_kind {
            return Err("its enum holds values of the wrong type".to_owned());
        }
    }
    if let (Some(minimum), Some(maximum)) = (parameter.minimum, parameter.maximum)
        && minimum > maximum
    {
        return Err("its minimum exceeds its maximum".to_owned());
    }
    if let (Some(minimum), Some(maximum)) = (parameter.min_length, parameter.max_length)
        && minimum > maximum
    {
        return Err("its min_length exceeds its max_length".to_owned());
    }
    Ok(())
}

/// A default is valid and belongs to an optional parameter.
fn check_default(parameter: &Parameter) -> Result<(), String> {
    if let Some(default) = &parameter.default {
        if !parameter.required_in.is_empty() {
            return Err("a required parameter cannot have a default".to_owned());
        }
        validation::check_value(parameter, default)
            .map_err(|error| format!("its default is invalid: {}", error.message))?;
    }
    Ok(())
}

/// The parameters the service reads by name (the prompt, duration,
/// resolution, the media lists, …) have the type and media kind it relies
/// on, and what it looks frames and rates up by has an enum.
fn check_what_the_service_relies_on(parameter: &Parameter) -> Result<(), String> {
    let expected_type = match parameter.name.as_str() {
        "prompt" | "negative_prompt" | "aspect_ratio" | "resolution" => Some(ParameterType::String),
        "duration" | "seed" => Some(ParameterType::Integer),
        "generate_audio" => Some(ParameterType::Boolean),
        "image_url" | "end_image_url" | "webhook_url" => Some(ParameterType::Uri),
        "reference_image_urls" | "reference_video_urls" | "reference_audio_urls" => {
            Some(ParameterType::UriArray)
        }
        _ => None,
    };
    if let Some(expected_type) = expected_type
        && expected_type != parameter.parameter_type
    {
        return Err(format!(
            "it must have type {expected_type:?}, which the service relies on"
        ));
    }
    let expected_media = match parameter.name.as_str() {
        "reference_video_urls" => Some(MediaKind::Video),
        "reference_audio_urls" => Some(MediaKind::Audio),
        "reference_image_urls" | "image_url" | "end_image_url" => Some(MediaKind::Image),
        _ => None,
    };
    if let Some(kind) = expected_media
        && parameter.media.as_ref().map(|media| media.kind) != Some(kind)
    {
        return Err(format!("it needs media limits of kind {kind:?}"));
    }
    let needs_enum = matches!(parameter.name.as_str(), "aspect_ratio" | "resolution");
    if needs_enum && parameter.allowed_values.is_none() {
        return Err(
            "it needs an enum, because frames and rates are looked up by its values".to_owned(),
        );
    }
    if parameter.name == "duration" && parameter.minimum.is_some_and(|minimum| minimum < 1) {
        return Err("durations must be at least one second".to_owned());
    }
    Ok(())
}
