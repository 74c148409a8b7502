//! Which granted endpoint the node calls: the one its options name, else
//! the only one its node is granted, whatever that one is called.

/// `named`: `options.endpoint`; `granted`: the node's `endpoints:`, as the
/// host reports them. A named endpoint is passed on as it is: the host
/// refuses one that is not granted.
pub fn choose(named: Option<&str>, granted: &[String]) -> Result<String, String> {
    if let Some(name) = named {
        return Ok(name.to_string());
    }
    match granted {
        [only] => Ok(only.clone()),
        [] => Err(
            "options.endpoint: this node is granted no endpoint; list the one it \
                   calls under the node's `endpoints:`"
                .into(),
        ),
        several => Err(format!(
            "options.endpoint is required: this node is granted {} endpoints ({}); \
             name the one to call",
            several.len(),
            several.join(", ")
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|n| n.to_string()).collect()
    }

    #[test]
    fn the_only_grant_is_used_whatever_its_name() {
        assert_eq!(choose(None, &names(&["claude"])).unwrap(), "claude");
        assert_eq!(choose(Some("b"), &names(&["a", "b"])).unwrap(), "b");
    }

    #[test]
    fn several_grants_need_a_name_and_none_is_refused() {
        let err = choose(None, &names(&["fast", "smart"])).unwrap_err();
        assert!(err.contains("options.endpoint is required"), "{err}");
        assert!(err.contains("fast, smart"), "{err}");
        assert!(
            choose(None, &[])
                .unwrap_err()
                .contains("granted no endpoint")
        );
    }
}
