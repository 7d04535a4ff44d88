//! The DTLS-SRTP keying material of a viewer's handshake, for our own SRTP. str0m runs
//! the handshake and keeps the material to itself; its crypto provider is pluggable,
//! though, so the DTLS instances it makes come from a provider that wraps the
//! aws-lc-rs one and copies the material out as it passes (RFC 5764 §4.2).
//!
//! Which instance copies into which slot: `str0m::Rtc` makes its one DTLS instance
//! while it is built, on the building thread, so [`build_capturing`] names the slot
//! in a thread-local for exactly that call.

use crate::srtp::Profile;
use std::cell::RefCell;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;
use str0m::crypto::dtls::{
    DtlsCert, DtlsImplError, DtlsInstance, DtlsOutput, DtlsProvider, DtlsVersion, ProtocolVersion,
    SrtpProfile,
};
use str0m::crypto::{CryptoError, CryptoProvider};
use str0m::{Rtc, RtcConfig};

/// The keying material of a finished handshake.
#[derive(Clone)]
pub struct Material {
    pub profile: Profile,
    pub bytes: Vec<u8>,
    /// Whether we were DTLS's client.
    pub client: bool,
}

impl std::fmt::Debug for Material {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Material")
            .field("profile", &self.profile)
            .field("client", &self.client)
            .finish_non_exhaustive()
    }
}

/// Where one handshake's material lands.
pub type Slot = Arc<Mutex<Option<Material>>>;

thread_local! {
    static NEXT: RefCell<Option<Slot>> = const { RefCell::new(None) };
}

/// Builds `config` into an `Rtc` whose DTLS handshake's keying material lands in the
/// returned slot. `config` must use [`provider`].
pub fn build_capturing(config: RtcConfig, now: Instant) -> (Rtc, Slot) {
    let slot = Slot::default();
    NEXT.with(|n| *n.borrow_mut() = Some(slot.clone()));
    let rtc = config.build(now);
    NEXT.with(|n| n.borrow_mut().take());
    (rtc, slot)
}

/// aws-lc-rs's crypto, with DTLS instances that copy their keying material out when
/// built by [`build_capturing`].
pub fn provider() -> Arc<CryptoProvider> {
    static PROVIDER: OnceLock<Arc<CryptoProvider>> = OnceLock::new();
    PROVIDER
        .get_or_init(|| {
            let mut provider = str0m::crypto::from_feature_flags();
            let inner = provider.dtls_provider;
            provider.dtls_provider = Box::leak(Box::new(Capturing { inner }));
            Arc::new(provider)
        })
        .clone()
}

/// The DTLS certificate every peer of the process shares: making one per peer is a key
/// generation per viewer.
pub fn certificate() -> Option<DtlsCert> {
    static CERT: OnceLock<Option<DtlsCert>> = OnceLock::new();
    CERT.get_or_init(|| provider().dtls_provider.generate_certificate())
        .clone()
}

#[derive(Debug)]
struct Capturing {
    inner: &'static dyn DtlsProvider,
}

impl DtlsProvider for Capturing {
    fn generate_certificate(&self) -> Option<DtlsCert> {
        self.inner.generate_certificate()
    }

    fn new_dtls(
        &self,
        cert: &DtlsCert,
        now: Instant,
        version: DtlsVersion,
        mtu: Option<usize>,
    ) -> Result<Box<dyn DtlsInstance>, CryptoError> {
        let inner = self.inner.new_dtls(cert, now, version, mtu)?;
        match NEXT.with(|n| n.borrow_mut().take()) {
            Some(slot) => Ok(Box::new(CapturingInstance { inner, slot })),
            None => Ok(inner),
        }
    }
}

#[derive(Debug)]
struct CapturingInstance {
    inner: Box<dyn DtlsInstance>,
    slot: Slot,
}

impl DtlsInstance for CapturingInstance {
    fn set_active(&mut self, active: bool) {
        self.inner.set_active(active)
    }

    fn handle_packet(&mut self, packet: &[u8]) -> Result<(), DtlsImplError> {
        self.inner.handle_packet(packet)
    }

    fn poll_output<'a>(&mut self, buf: &'a mut [u8]) -> DtlsOutput<'a> {
        let client = self.inner.is_active();
        let output = self.inner.poll_output(buf);
        if let DtlsOutput::KeyingMaterial(material, profile) = &output {
            let profile = match profile {
                SrtpProfile::AES128_CM_SHA1_80 => Some(Profile::Aes128CmSha1_80),
                SrtpProfile::AEAD_AES_128_GCM => Some(Profile::AeadAes128Gcm),
                SrtpProfile::AEAD_AES_256_GCM => Some(Profile::AeadAes256Gcm),
                _ => None,
            };
            if let Some(profile) = profile {
                let material = Material {
                    profile,
                    bytes: material.to_vec(),
                    client,
                };
                *self.slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(material);
            }
        }
        output
    }

    fn handle_timeout(&mut self, now: Instant) -> Result<(), DtlsImplError> {
        self.inner.handle_timeout(now)
    }

    fn send_application_data(&mut self, data: &[u8]) -> Result<usize, DtlsImplError> {
        self.inner.send_application_data(data)
    }

    fn is_active(&self) -> bool {
        self.inner.is_active()
    }

    fn protocol_version(&self) -> Option<ProtocolVersion> {
        self.inner.protocol_version()
    }

    fn is_closing(&self) -> bool {
        self.inner.is_closing()
    }

    fn is_closed(&self) -> bool {
        self.inner.is_closed()
    }

    fn close(&mut self) -> Result<(), DtlsImplError> {
        self.inner.close()
    }
}
