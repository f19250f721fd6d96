//! Protected mode, as a user meets it: `skiff serve --listen 0.0.0.0:…` with no users
//! configured serves a loopback client and refuses a client that reaches it through a
//! non-loopback address (this host's own, so the peer address is not loopback) with
//! NO_PERMISSION and a remark naming the way out; its metrics endpoint does the same with 403.
//! With `protected_mode = false` both are served.

use crate::common;

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use anyhow::{ensure, Context};
use common::{request, spawn_serve, wait_serving};
use skiff::remoting::codes::{request as rc, response as code, AUTO_CREATE_TOPIC_KEY};
use skiff::remoting::{ClientConfig, RemotingClient};

/// An IPv4 address of this host that is not loopback (a test network namespace has one too).
fn non_loopback_ipv4() -> anyhow::Result<Ipv4Addr> {
    let mut found = None;
    // SAFETY: getifaddrs fills a list we read and free once; each ifa_addr is checked for null
    // and read as sockaddr_in only when its family says AF_INET.
    unsafe {
        let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
        ensure!(libc::getifaddrs(&mut list) == 0, "getifaddrs failed");
        let mut at = list;
        while !at.is_null() {
            let addr = (*at).ifa_addr;
            if !addr.is_null() && i32::from((*addr).sa_family) == libc::AF_INET {
                let v4 = &*(addr as *const libc::sockaddr_in);
                let ip = Ipv4Addr::from(u32::from_be(v4.sin_addr.s_addr));
                if !ip.is_loopback() && !ip.is_unspecified() {
                    found = Some(ip);
                    break;
                }
            }
            at = (*at).ifa_next;
        }
        libc::freeifaddrs(list);
    }
    found.context("this host has no non-loopback IPv4 address to reach skiff through")
}

async fn route_answer(client: &RemotingClient, addr: &str) -> anyhow::Result<(i32, String)> {
    let route = request(
        rc::GET_ROUTEINFO_BY_TOPIC,
        &[("topic", AUTO_CREATE_TOPIC_KEY)],
    );
    let answer = client
        .invoke(addr, route, Duration::from_secs(5))
        .await
        .with_context(|| format!("route request to {addr}"))?;
    Ok((answer.code, answer.remark.unwrap_or_default()))
}

async fn metrics_status(addr: &str) -> anyhow::Result<String> {
    let answer = common::http_get(addr, "/metrics").await?;
    Ok(answer.lines().next().unwrap_or_default().to_string())
}

struct Ports {
    main: u16,
    metrics: u16,
}

fn serve_on_every_address(
    dir: &std::path::Path,
    protected: bool,
) -> anyhow::Result<(common::ServeChild, Ports)> {
    let ports = Ports {
        main: common::free_port_on("0.0.0.0")?,
        metrics: common::free_port_on("0.0.0.0")?,
    };
    let child = spawn_serve(
        dir,
        &format!("0.0.0.0:{}", ports.main),
        &[
            ("SKIFF_METRICS_LISTEN", format!("0.0.0.0:{}", ports.metrics)),
            ("SKIFF_GRPC_LISTEN", "off".to_string()),
            ("SKIFF_PROTECTED_MODE", protected.to_string()),
        ],
    )?;
    Ok((child, ports))
}

#[test]
fn protected_mode_serves_loopback_clients_only_until_turned_off() -> anyhow::Result<()> {
    let outside = IpAddr::V4(non_loopback_ipv4()?);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let protected_dir = tempfile::tempdir()?;
    let (serve, ports) = serve_on_every_address(protected_dir.path(), true)?;
    runtime.block_on(async {
        let client = RemotingClient::new(ClientConfig::default());
        let loopback = format!("127.0.0.1:{}", ports.main);
        wait_serving(&client, &loopback, "Protected").await?;
        let (code_from_outside, remark) =
            route_answer(&client, &format!("{outside}:{}", ports.main)).await?;
        ensure!(
            code_from_outside == code::NO_PERMISSION,
            "a non-loopback peer got {code_from_outside} ({remark})"
        );
        ensure!(
            remark.contains("protected mode") && remark.contains("--protected-mode off"),
            "the remark does not say how to opt out: {remark}"
        );
        let (code_from_loopback, _) = route_answer(&client, &loopback).await?;
        ensure!(
            code_from_loopback == code::SUCCESS,
            "loopback got {code_from_loopback}"
        );
        let outside_metrics = metrics_status(&format!("{outside}:{}", ports.metrics)).await?;
        ensure!(
            outside_metrics.contains("403"),
            "metrics from outside: {outside_metrics}"
        );
        let loopback_metrics = metrics_status(&format!("127.0.0.1:{}", ports.metrics)).await?;
        ensure!(
            loopback_metrics.contains("200"),
            "metrics from loopback: {loopback_metrics}"
        );
        client.shutdown();
        Ok::<_, anyhow::Error>(())
    })?;
    drop(serve);
    let log = std::fs::read_to_string(protected_dir.path().join("serve.log"))?;
    ensure!(
        log.lines().any(|l| l.contains("protected mode")),
        "the start log does not mention protected mode"
    );

    let open_dir = tempfile::tempdir()?;
    let (serve, ports) = serve_on_every_address(open_dir.path(), false)?;
    runtime.block_on(async {
        let client = RemotingClient::new(ClientConfig::default());
        wait_serving(&client, &format!("127.0.0.1:{}", ports.main), "Protected").await?;
        let (code_from_outside, remark) =
            route_answer(&client, &format!("{outside}:{}", ports.main)).await?;
        ensure!(
            code_from_outside == code::SUCCESS,
            "with protected mode off a non-loopback peer got {code_from_outside} ({remark})"
        );
        let outside_metrics = metrics_status(&format!("{outside}:{}", ports.metrics)).await?;
        ensure!(
            outside_metrics.contains("200"),
            "metrics from outside: {outside_metrics}"
        );
        client.shutdown();
        Ok::<_, anyhow::Error>(())
    })?;
    drop(serve);
    Ok(())
}
