//! `NodeConfig::load`: each source, and each refusal naming its key, source and allowed values.

use super::*;

#[test]
fn the_http_listen_spelling_sets_the_http_listener_and_both_spellings_are_refused() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let one = dir.path().join("one.toml");
    std::fs::write(&one, "http_listen = \"127.0.0.1:5999\"\n").expect("written");
    let config = NodeConfig::load(Some(&one)).expect("http_listen is accepted");
    assert_eq!(config.metrics_listen, "127.0.0.1:5999");
    let both = dir.path().join("both.toml");
    std::fs::write(
        &both,
        "http_listen = \"127.0.0.1:5999\"\nmetrics_listen = \"off\"\n",
    )
    .expect("written");
    let refused = NodeConfig::load(Some(&both));
    assert!(
        matches!(
            refused,
            Err(ConfigError::Invalid { ref key, .. }) if key == "metrics_listen"
        ),
        "{refused:?}"
    );
}

#[test]
fn defaults_bind_loopback_9876_with_async_flush() {
    let config = NodeConfig::default();
    assert_eq!(config.listen.to_string(), "127.0.0.1:9876");
    assert_eq!(config.flush, FlushPolicy::Async);
    assert_eq!(
        config.flush_consumer_offset_interval,
        Duration::from_secs(5)
    );
    assert!(config.validate().is_ok());
}

#[test]
fn file_values_override_defaults() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("skiff.toml");
    std::fs::write(&path, "flush = \"sync\"\ndefault_topic_queue_nums = 8\n")?;
    let config = NodeConfig::load(Some(&path))?;
    assert_eq!(config.flush, FlushPolicy::Sync);
    assert_eq!(config.default_topic_queue_nums, 8);
    assert_eq!(config.broker_name, "skiff");
    Ok(())
}

#[test]
fn environment_overrides_the_file_and_unrelated_variables_are_ignored() -> anyhow::Result<()> {
    // The only test touching SKIFF_* variables, and on a field no other test reads, so
    // tests running in parallel are not affected.
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("skiff.toml");
    std::fs::write(&path, "channel_expiry_ms = 9000\n")?;
    std::env::set_var("SKIFF_CHANNEL_EXPIRY_MS", "7000");
    std::env::set_var("SKIFF_RETENTION", "10m");
    std::env::set_var("SKIFF_NOT_A_SETTING", "1");
    let loaded = NodeConfig::load(Some(&path));
    let unknown = NodeConfig::unknown_environment();
    std::env::remove_var("SKIFF_CHANNEL_EXPIRY_MS");
    std::env::remove_var("SKIFF_RETENTION");
    std::env::remove_var("SKIFF_NOT_A_SETTING");
    let loaded = loaded?;
    assert_eq!(loaded.channel_expiry, Duration::from_millis(7000));
    assert_eq!(loaded.retention, Duration::from_secs(600));
    assert!(
        unknown.contains(&"SKIFF_NOT_A_SETTING".to_string()),
        "{unknown:?}"
    );
    Ok(())
}

#[test]
fn retention_durations_read_as_people_write_them_and_ratios_are_checked() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("skiff.toml");
    std::fs::write(
        &path,
        "retention = \"90s\"\ncleanup_interval = \"500ms\"\ndisk_full_ratio = 0.95\n",
    )?;
    let config = NodeConfig::load(Some(&path))?;
    assert_eq!(config.retention, Duration::from_secs(90));
    assert_eq!(config.cleanup_interval, Duration::from_millis(500));
    assert_eq!(config.disk_full_ratio, 0.95);
    assert_eq!(
        NodeConfig::default().retention,
        Duration::from_secs(72 * 3600)
    );
    for bad in [
        "disk_full_ratio = 1.5\n",
        "disk_max_used_ratio = 0.95\n",
        "cleanup_interval = \"0s\"\n",
        "retention = \"soon\"\n",
    ] {
        std::fs::write(&path, bad)?;
        assert!(NodeConfig::load(Some(&path)).is_err(), "{bad} accepted");
    }
    Ok(())
}

#[test]
fn millisecond_keys_read_whole_milliseconds_into_durations() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("skiff.toml");
    type Field = fn(&NodeConfig) -> Duration;
    let cases: [(&str, Field); 13] = [
        ("flush_interval_ms", |c| c.flush_interval),
        ("sync_flush_timeout_ms", |c| c.sync_flush_timeout),
        ("flush_consumer_offset_interval_ms", |c| {
            c.flush_consumer_offset_interval
        }),
        ("channel_expiry_ms", |c| c.channel_expiry),
        ("lock_expiry_ms", |c| c.lock_expiry),
        ("pop_checkpoint_window_ms", |c| c.pop_checkpoint_window),
        ("lite_subscription_expiry_ms", |c| {
            c.lite_subscription_expiry
        }),
        ("lite_ttl_check_interval_ms", |c| c.lite_ttl_check_interval),
        ("lite_min_ttl_ms", |c| c.lite_min_ttl),
        ("idle_queue_release_ms", |c| c.idle_queue_release),
        ("channel_idle_timeout_ms", |c| c.channel_idle_timeout),
        ("transaction_timeout_ms", |c| c.transaction_timeout),
        ("transaction_check_interval_ms", |c| {
            c.transaction_check_interval
        }),
    ];
    for (key, field) in cases {
        std::fs::write(&path, format!("{key} = 1234\n"))?;
        let config = NodeConfig::load(Some(&path))?;
        assert_eq!(field(&config), Duration::from_millis(1234), "{key}");
        let written = serde_json::to_value(&config)?;
        assert_eq!(written[key], 1234, "{key} is written back in ms");
    }
    std::fs::write(&path, "channel_expiry_ms = \"2m\"\n")?;
    assert!(
        NodeConfig::load(Some(&path)).is_err(),
        "a *_ms key takes a number of milliseconds, as before"
    );
    Ok(())
}

/// Loads `text` as a `skiff.toml` and answers the refusal's text, checking it is an
/// [`ConfigError::Invalid`] of `key` from that file.
fn refusal_of(text: &str, key: &str) -> anyhow::Result<String> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("skiff.toml");
    std::fs::write(&path, text)?;
    match NodeConfig::load(Some(&path)) {
        Err(error @ ConfigError::Invalid { .. }) => {
            let ConfigError::Invalid {
                key: refused,
                origin,
                ..
            } = &error
            else {
                unreachable!("matched above")
            };
            anyhow::ensure!(refused == key, "{error}: refused {refused}, not {key}");
            anyhow::ensure!(*origin == Origin::File(path.clone()), "{error}: {origin:?}");
            let text = error.to_string();
            anyhow::ensure!(text.contains(&path.display().to_string()), "{text}");
            Ok(text)
        }
        other => anyhow::bail!("{text:?} loaded as {other:?}"),
    }
}

#[test]
fn an_unknown_flush_policy_names_the_key_the_file_and_the_allowed_values() -> anyhow::Result<()> {
    let text = refusal_of("flush = \"sometimes\"\n", "flush")?;
    assert!(
        text.contains("\"sometimes\"") && text.contains("async, sync"),
        "{text}"
    );
    let text = refusal_of("tls_mode = \"strict\"\n", "tls_mode")?;
    assert!(text.contains("disabled, permissive, enforcing"), "{text}");
    Ok(())
}

#[test]
fn sizes_take_units_in_the_file_and_a_refusal_lists_them() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("skiff.toml");
    for (written, bytes) in [
        ("\"1GiB\"", 1u64 << 30),
        ("\"1 GiB\"", 1 << 30),
        ("\"512MiB\"", 512 << 20),
        ("268435456", 256 << 20),
    ] {
        std::fs::write(&path, format!("segment_size = {written}\n"))?;
        let config = NodeConfig::load(Some(&path))?;
        assert_eq!(config.segment_size, bytes, "{written}");
    }
    std::fs::write(
        &path,
        "max_message_size = \"64KiB\"\nmax_frame_bytes = \"1MiB\"\n",
    )?;
    let config = NodeConfig::load(Some(&path))?;
    assert_eq!(
        (config.max_message_size, config.max_frame_bytes),
        (64 << 10, 1 << 20)
    );
    let text = refusal_of("segment_size = \"1GB\"\n", "segment_size")?;
    assert!(text.contains("GiB") && text.contains("MiB"), "{text}");
    let text = refusal_of("max_message_size = -1\n", "max_message_size")?;
    assert!(text.contains("negative"), "{text}");
    Ok(())
}

#[test]
fn listen_takes_localhost_as_loopback_and_refuses_other_host_names_saying_what_to_write(
) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("skiff.toml");
    std::fs::write(&path, "listen = \"localhost:9877\"\n")?;
    let config = NodeConfig::load(Some(&path))?;
    assert_eq!(config.listen.to_string(), "127.0.0.1:9877");
    let text = refusal_of("listen = \"broker.example:9876\"\n", "listen")?;
    assert!(
        text.contains("host name") && text.contains("0.0.0.0:9876"),
        "{text}"
    );
    let text = refusal_of("grpc_listen = \"everywhere\"\n", "grpc_listen")?;
    assert!(text.contains("or off"), "{text}");
    Ok(())
}

#[test]
fn switches_take_on_and_off_as_the_flags_do() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("skiff.toml");
    std::fs::write(
        &path,
        "protected_mode = \"off\"\nauto_create_topic = false\nkey_index = \"on\"\n",
    )?;
    let config = NodeConfig::load(Some(&path))?;
    assert!(!config.protected_mode && !config.auto_create_topic && config.key_index);
    let text = refusal_of(
        "auto_create_subscription_group = \"maybe\"\n",
        "auto_create_subscription_group",
    )?;
    assert!(text.contains("on or off"), "{text}");
    Ok(())
}

#[test]
fn a_millisecond_key_refused_names_itself_and_what_it_expects() -> anyhow::Result<()> {
    let text = refusal_of("channel_expiry_ms = \"2m\"\n", "channel_expiry_ms")?;
    assert!(
        text.contains("\"2m\" is not a whole number of milliseconds"),
        "{text}"
    );
    let text = refusal_of("flush_interval_ms = 0\n", "flush_interval_ms")?;
    assert!(text.contains("greater than zero"), "{text}");
    Ok(())
}

#[test]
fn an_unknown_key_names_the_file_and_the_setting_it_likely_meant() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("skiff.toml");
    std::fs::write(&path, "flsh = \"sync\"\n")?;
    let error = NodeConfig::load(Some(&path)).expect_err("an unknown key");
    let text = error.to_string();
    assert!(
        matches!(&error, ConfigError::UnknownKey { key, suggestion: Some(s), .. } if key == "flsh" && s == "flush"),
        "{text}"
    );
    assert!(text.contains(&path.display().to_string()), "{text}");
    Ok(())
}

#[test]
fn a_refusal_after_the_flags_names_the_flag() {
    let config = NodeConfig {
        segment_size: 1024,
        ..NodeConfig::default()
    };
    let mut origins = Origins::default();
    origins.set("segment_size", Origin::Flag("--segment-size".into()));
    let text = config
        .validate_from(&origins)
        .expect_err("a segment smaller than a message")
        .to_string();
    assert!(
        text.contains("segment_size") && text.contains("flag --segment-size"),
        "{text}"
    );
}

#[test]
fn a_duration_refused_says_how_durations_are_written() -> anyhow::Result<()> {
    let text = refusal_of("retention = \"soon\"\n", "retention")?;
    assert!(text.contains("72h") && text.contains("500ms"), "{text}");
    let text = refusal_of("lock_expiry_ms = \"1m\"\n", "lock_expiry_ms")?;
    assert!(text.contains("milliseconds"), "{text}");
    Ok(())
}
