//! The check of a model's entry against its catalog model, when the
//! backends file is read: known modes, a target for each, every parameter
//! a configured mode accepts mapped and every price-affecting one sent.

use vidgate_core::Mode;

use super::{HostedModeConfig, HostedModelConfig, Limit, is_calendar_date, value_key};
use crate::backend::hosted::budget::BudgetLimits;
use crate::backend::hosted::references::ReferenceKind;

impl HostedModelConfig {
    /// Checks the file against the catalog model: known modes, a target for
    /// each, a mapping for every parameter a configured mode accepts, and
    /// `accepts` and `when_present` naming parameters the mode has.
    pub fn check(&self, model: &vidgate_core::Model) -> Result<(), String> {
        if !(self.timeouts.usual_run_seconds > 0.0 && self.timeouts.usual_run_seconds.is_finite()) {
            return Err("timeouts: usual_run_seconds must be a positive number of seconds".into());
        }
        if let Some(budget) = &self.budget {
            BudgetLimits::resolve(budget)?;
        }
        for line in &self.costs {
            if !is_calendar_date(&line.from) {
                return Err(format!("costs: {:?} is not a date YYYY-MM-DD", line.from));
            }
            vidgate_core::Micros::parse_usd(&line.usd_per_second).map_err(|_| {
                format!(
                    "costs: {:?} is not an amount of US dollars",
                    line.usd_per_second
                )
            })?;
        }
        for parameter in self.accepts.keys() {
            if model.parameter(parameter).is_none() {
                return Err(format!("accepts names no parameter {parameter:?}"));
            }
        }
        for limit in &self.limits {
            check_limit(limit, &|name| model.parameter(name).is_some())?;
        }
        for syntax in self
            .references
            .iter()
            .chain(self.modes.values().flat_map(|mode| {
                mode.references.iter().chain(
                    mode.when_present
                        .values()
                        .flat_map(|variant| &variant.references),
                )
            }))
        {
            syntax.check()?;
        }
        let targets = self.targets();
        for target in &self.unverified {
            if !targets.contains(target) {
                return Err(format!(
                    "unverified names {target:?}, which no mode sends jobs to"
                ));
            }
        }
        for (mode_name, mode) in &self.modes {
            self.check_mode(model, mode_name, mode)?;
        }
        Ok(())
    }

    /// Checks one mode's entry: a mode the model has, `accepts`, `limits`
    /// and `when_present` naming parameters the mode takes, a reference
    /// syntax for every kind of list it sends, one way to its target, and
    /// a mapping for every parameter it takes.
    fn check_mode(
        &self,
        model: &vidgate_core::Model,
        mode_name: &str,
        mode: &HostedModeConfig,
    ) -> Result<(), String> {
        let parsed: Mode = mode_name
            .parse()
            .map_err(|_| format!("{mode_name:?} is not a mode"))?;
        if !model.modes().contains(&parsed) {
            return Err(format!("the model has no mode {mode_name}"));
        }
        let in_mode = |name: &str| {
            model
                .parameter(name)
                .is_some_and(|parameter| parameter.accepted_in(parsed))
        };
        for parameter in mode.accepts.keys() {
            if !in_mode(parameter) {
                return Err(format!(
                    "{mode_name}: accepts names {parameter:?}, which the mode does not take"
                ));
            }
        }
        for limit in &mode.limits {
            check_limit(limit, &in_mode).map_err(|error| format!("{mode_name}: {error}"))?;
        }
        self.check_mode_references(mode_name, mode, &in_mode)?;
        for (parameter, variant) in &mode.when_present {
            if !in_mode(parameter) {
                return Err(format!(
                    "{mode_name}: when_present names {parameter:?}, which the mode does not take"
                ));
            }
            if variant.target.trim().is_empty() {
                return Err(format!(
                    "{mode_name}: when_present {parameter} has no target"
                ));
            }
        }
        check_mode_target(model, mode_name, mode)?;
        self.check_mode_mappings(model, mode_name, mode, parsed)
    }

    /// A target that names references its own way must have a syntax for
    /// every kind of list the mode sends it.
    fn check_mode_references(
        &self,
        mode_name: &str,
        mode: &HostedModeConfig,
        in_mode: &dyn Fn(&str) -> bool,
    ) -> Result<(), String> {
        let variants = std::iter::once(None).chain(mode.when_present.values().map(Some));
        for variant in variants {
            let Some(syntax) = variant
                .and_then(|variant| variant.references.as_ref())
                .or(mode.references.as_ref())
                .or(self.references.as_ref())
            else {
                continue;
            };
            for kind in ReferenceKind::ALL {
                let list = kind.list_parameter();
                if in_mode(list)
                    && matches!(self.mapping(mode, variant, list), Some(Some(_)))
                    && syntax.template(kind).is_none()
                {
                    return Err(format!(
                        "{mode_name}: references has no {} syntax, but the mode sends {list}",
                        kind.word().to_lowercase()
                    ));
                }
            }
        }
        Ok(())
    }

    /// Every parameter the mode takes is mapped (or left out with `null`)
    /// for each of its targets, and no price-affecting one is left out
    /// unless it chooses the target.
    fn check_mode_mappings(
        &self,
        model: &vidgate_core::Model,
        mode_name: &str,
        mode: &HostedModeConfig,
        parsed: Mode,
    ) -> Result<(), String> {
        let variants = std::iter::once(None).chain(mode.when_present.values().map(Some));
        for variant in variants {
            for parameter in model.parameters() {
                // Our own webhook is never the provider's business.
                if !parameter.accepted_in(parsed) || parameter.name == "webhook_url" {
                    continue;
                }
                match self.mapping(mode, variant, &parameter.name) {
                    None => {
                        return Err(format!(
                            "{mode_name}: the parameter {} has no field mapping (map it, or set it to null to leave it out)",
                            parameter.name
                        ));
                    }
                    Some(None)
                        if parameter.price_affecting
                            && mode.target_by.as_ref().map(|by| by.parameter.as_str())
                                != Some(parameter.name.as_str()) =>
                    {
                        return Err(format!(
                            "{mode_name}: the price-affecting parameter {} must be sent",
                            parameter.name
                        ));
                    }
                    Some(_) => {}
                }
            }
        }
        Ok(())
    }
}

/// A mode names either one target, or a target for every value of the
/// parameter that chooses it (`target_by`).
fn check_mode_target(
    model: &vidgate_core::Model,
    mode_name: &str,
    mode: &HostedModeConfig,
) -> Result<(), String> {
    match (&mode.target, &mode.target_by) {
        (Some(_), None) => Ok(()),
        (None, Some(by)) => {
            let parameter = model.parameter(&by.parameter).ok_or_else(|| {
                format!(
                    "{mode_name}: target_by names no parameter {:?}",
                    by.parameter
                )
            })?;
            for allowed in parameter.allowed_values.iter().flatten() {
                let key = value_key(allowed);
                if !by.targets.contains_key(&key) {
                    return Err(format!(
                        "{mode_name}: target_by has no target for {} {key}",
                        by.parameter
                    ));
                }
            }
            Ok(())
        }
        _ => Err(format!("{mode_name}: give either target or target_by")),
    }
}

/// Checks a limit's parameters (`known` says which the model or mode
/// has) and that it limits something.
fn check_limit(limit: &Limit, known: &dyn Fn(&str) -> bool) -> Result<(), String> {
    for parameter in limit.parameters() {
        if !known(parameter) {
            return Err(format!(
                "limits: {parameter:?} is not a parameter here (limit on {})",
                limit.parameter
            ));
        }
    }
    if limit.max_length.is_none() && limit.max_items.is_none() && limit.accepts.is_none() {
        return Err(format!(
            "limits: the limit on {} gives none of max_length, max_items, accepts",
            limit.parameter
        ));
    }
    if !limit.counted_with.is_empty() && limit.max_items.is_none() {
        return Err(format!(
            "limits: the limit on {} counts with other lists but gives no max_items",
            limit.parameter
        ));
    }
    Ok(())
}

/// Refuses a provider URL of the backends file that would carry the
/// credential in the clear: https, or plain http to this machine only (a
/// local proxy, a test's fake).
pub fn check_provider_url(text: &str) -> Result<(), String> {
    let url = url::Url::parse(text).map_err(|_| format!("{text:?} is not an http(s) URL"))?;
    let loopback = match url.host() {
        Some(url::Host::Domain(domain)) => domain.eq_ignore_ascii_case("localhost"),
        Some(url::Host::Ipv4(address)) => address.is_loopback(),
        Some(url::Host::Ipv6(address)) => address.is_loopback(),
        None => false,
    };
    match url.scheme() {
        "https" => Ok(()),
        "http" if loopback => Ok(()),
        "http" => Err(format!(
            "{text:?} is plain http to another machine: use https (plain http only to loopback)"
        )),
        _ => Err(format!("{text:?} is not an http(s) URL")),
    }
}
