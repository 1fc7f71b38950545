//! The NBD wire format as the NBD project's `doc/proto.md` describes it: the fixed-newstyle
//! handshake (greeting, client flags, option requests and replies) and the transmission
//! phase (request header, simple reply). Pure: no I/O, so every message can be
//! round-tripped by property tests and every decoder fed arbitrary bytes by the fuzzer.
//!
//! All integers are big-endian ("network byte order"). Decoders never trust a length field
//! further than the bytes they were given, and never allocate more than the input's size.

use thiserror::Error;

/// ASCII "NBDMAGIC": first 8 bytes the server sends.
pub const NBDMAGIC: u64 = 0x4e42_444d_4147_4943;
/// ASCII "IHAVEOPT": newstyle greeting magic, and the prefix of every option request.
pub const IHAVEOPT: u64 = 0x4948_4156_454f_5054;
/// Prefix of every fixed-newstyle option reply.
pub const OPTION_REPLY_MAGIC: u64 = 0x0003_e889_0455_65a9;
/// `NBD_REQUEST_MAGIC`.
pub const REQUEST_MAGIC: u32 = 0x2560_9513;
/// `NBD_SIMPLE_REPLY_MAGIC`.
pub const SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;

/// Handshake flags (16 bits, server → client, in the greeting).
pub mod handshake_flags {
    pub const FIXED_NEWSTYLE: u16 = 1 << 0;
    pub const NO_ZEROES: u16 = 1 << 1;
}

/// Client flags (32 bits, client → server, after the greeting).
pub mod client_flags {
    pub const FIXED_NEWSTYLE: u32 = 1 << 0;
    pub const NO_ZEROES: u32 = 1 << 1;
}

/// Transmission flags (16 bits, per export).
pub mod transmission_flags {
    pub const HAS_FLAGS: u16 = 1 << 0;
    pub const READ_ONLY: u16 = 1 << 1;
    pub const SEND_FLUSH: u16 = 1 << 2;
    pub const SEND_FUA: u16 = 1 << 3;
    pub const ROTATIONAL: u16 = 1 << 4;
    pub const SEND_TRIM: u16 = 1 << 5;
    pub const SEND_WRITE_ZEROES: u16 = 1 << 6;
    pub const SEND_DF: u16 = 1 << 7;
    pub const CAN_MULTI_CONN: u16 = 1 << 8;
    pub const SEND_RESIZE: u16 = 1 << 9;
    pub const SEND_CACHE: u16 = 1 << 10;
    pub const SEND_FAST_ZERO: u16 = 1 << 11;
}

/// Option codes (`NBD_OPT_*`).
pub mod opt {
    pub const EXPORT_NAME: u32 = 1;
    pub const ABORT: u32 = 2;
    pub const LIST: u32 = 3;
    pub const STARTTLS: u32 = 5;
    pub const INFO: u32 = 6;
    pub const GO: u32 = 7;
    pub const STRUCTURED_REPLY: u32 = 8;
    pub const LIST_META_CONTEXT: u32 = 9;
    pub const SET_META_CONTEXT: u32 = 10;
    pub const EXTENDED_HEADERS: u32 = 11;
}

/// Option reply types (`NBD_REP_*`); errors have bit 31 set.
pub mod rep {
    pub const ACK: u32 = 1;
    pub const SERVER: u32 = 2;
    pub const INFO: u32 = 3;
    pub const META_CONTEXT: u32 = 4;
    pub const ERR_UNSUP: u32 = (1 << 31) + 1;
    pub const ERR_POLICY: u32 = (1 << 31) + 2;
    pub const ERR_INVALID: u32 = (1 << 31) + 3;
    pub const ERR_PLATFORM: u32 = (1 << 31) + 4;
    pub const ERR_TLS_REQD: u32 = (1 << 31) + 5;
    pub const ERR_UNKNOWN: u32 = (1 << 31) + 6;
    pub const ERR_SHUTDOWN: u32 = (1 << 31) + 7;
    pub const ERR_BLOCK_SIZE_REQD: u32 = (1 << 31) + 8;
    pub const ERR_TOO_BIG: u32 = (1 << 31) + 9;

    pub fn is_error(reply_type: u32) -> bool {
        reply_type & (1 << 31) != 0
    }
}

/// Information types inside `NBD_REP_INFO` (`NBD_INFO_*`).
pub mod info {
    pub const EXPORT: u16 = 0;
    pub const NAME: u16 = 1;
    pub const DESCRIPTION: u16 = 2;
    pub const BLOCK_SIZE: u16 = 3;
}

/// Command types (`NBD_CMD_*`).
pub mod cmd {
    pub const READ: u16 = 0;
    pub const WRITE: u16 = 1;
    pub const DISC: u16 = 2;
    pub const FLUSH: u16 = 3;
    pub const TRIM: u16 = 4;
    pub const CACHE: u16 = 5;
    pub const WRITE_ZEROES: u16 = 6;
    pub const BLOCK_STATUS: u16 = 7;
}

/// Command flags (`NBD_CMD_FLAG_*`).
pub mod cmd_flags {
    pub const FUA: u16 = 1 << 0;
    pub const NO_HOLE: u16 = 1 << 1;
    pub const DF: u16 = 1 << 2;
    pub const REQ_ONE: u16 = 1 << 3;
    pub const FAST_ZERO: u16 = 1 << 4;
}

/// Error values of the reply's error field (`NBD_E*`): fixed numbers, not the host's errno.
pub mod errno {
    pub const EPERM: u32 = 1;
    pub const EIO: u32 = 5;
    pub const ENOMEM: u32 = 12;
    pub const EINVAL: u32 = 22;
    pub const ENOSPC: u32 = 28;
    pub const EOVERFLOW: u32 = 75;
    pub const ENOTSUP: u32 = 95;
    pub const ESHUTDOWN: u32 = 108;
}

pub const GREETING_LEN: usize = 18;
pub const CLIENT_FLAGS_LEN: usize = 4;
pub const OPTION_HEADER_LEN: usize = 16;
pub const OPTION_REPLY_HEADER_LEN: usize = 20;
pub const REQUEST_LEN: usize = 28;
pub const SIMPLE_REPLY_LEN: usize = 16;
/// Size, flags and the 124 reserved zero bytes of the `NBD_OPT_EXPORT_NAME` reply.
pub const EXPORT_NAME_REPLY_LEN: usize = 8 + 2 + 124;
pub const EXPORT_NAME_REPLY_LEN_NO_ZEROES: usize = 8 + 2;

/// "MUST be no longer than 4096 bytes" for every protocol string.
pub const MAX_STRING_LEN: usize = 4096;

/// Size constraints advertised with `NBD_INFO_BLOCK_SIZE`. The engine merges sub-sector
/// writes itself, so any alignment is correct (minimum 1, the protocol default); 4 KiB
/// avoids the read-merge-write of partial sectors; 32 MiB is the largest payload every
/// client may assume (2^25) and what one request may pin in memory.
pub const MIN_BLOCK_SIZE: u32 = 1;
pub const PREFERRED_BLOCK_SIZE: u32 = 4096;
pub const MAX_PAYLOAD: u32 = 32 << 20;

/// Why bytes could not be decoded into a message.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ProtocolError {
    #[error("message truncated: need {need} bytes, have {have}")]
    Truncated { need: usize, have: usize },
    #[error("bad magic {0:#x}")]
    BadMagic(u64),
    #[error("invalid string: {0}")]
    BadString(&'static str),
    #[error("malformed {what}: {why}")]
    Malformed { what: &'static str, why: &'static str },
    #[error("client flags {flags:#x} not understood")]
    BadClientFlags { flags: u32 },
}

type Result<T> = std::result::Result<T, ProtocolError>;

/// Big-endian cursor over a byte slice that reports truncation instead of panicking.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        Reader { bytes, at: 0 }
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self.at.checked_add(n).filter(|e| *e <= self.bytes.len());
        match end {
            Some(end) => {
                let s = &self.bytes[self.at..end];
                self.at = end;
                Ok(s)
            }
            None => Err(ProtocolError::Truncated { need: self.at.saturating_add(n), have: self.bytes.len() }),
        }
    }
    fn array<const N: usize>(&mut self) -> Result<[u8; N]> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }
    fn u16(&mut self) -> Result<u16> {
        Ok(u16::from_be_bytes(self.array()?))
    }
    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_be_bytes(self.array()?))
    }
    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_be_bytes(self.array()?))
    }
    fn rest(&mut self) -> &'a [u8] {
        let s = &self.bytes[self.at..];
        self.at = self.bytes.len();
        s
    }
    fn remaining(&self) -> usize {
        self.bytes.len() - self.at
    }
}

/// Checks the protocol's string rules: UTF-8, no NUL, at most 4096 bytes.
pub fn decode_string(bytes: &[u8]) -> Result<String> {
    if bytes.len() > MAX_STRING_LEN {
        return Err(ProtocolError::BadString("longer than 4096 bytes"));
    }
    if bytes.contains(&0) {
        return Err(ProtocolError::BadString("contains NUL"));
    }
    String::from_utf8(bytes.to_vec()).map_err(|_| ProtocolError::BadString("not UTF-8"))
}

/// Whether `s` may be sent as a protocol string (encoders only emit such strings).
pub fn is_valid_string(s: &str) -> bool {
    s.len() <= MAX_STRING_LEN && !s.as_bytes().contains(&0)
}

/// Cuts `s` to a valid protocol string: drops NULs and truncates to 4096 bytes on a
/// character boundary. Used for server-generated text (descriptions, error messages).
pub fn sanitize_string(s: &str) -> String {
    let mut out: String = s.chars().filter(|c| *c != '\0').collect();
    if out.len() > MAX_STRING_LEN {
        let mut cut = MAX_STRING_LEN;
        while !out.is_char_boundary(cut) {
            cut -= 1;
        }
        out.truncate(cut);
    }
    out
}

fn u32_len(n: usize) -> u32 {
    // Every encoder bounds its payloads far below 4 GiB (strings ≤ 4096 bytes, info lists ≤
    // 65535 entries), so this only saturates for values that could not be sent anyway.
    u32::try_from(n).unwrap_or(u32::MAX)
}

// ------------------------------------------------------------------------- handshake

/// The newstyle greeting: NBDMAGIC, IHAVEOPT, handshake flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerGreeting {
    pub flags: u16,
}

impl ServerGreeting {
    pub fn encode(&self) -> [u8; GREETING_LEN] {
        let mut out = [0u8; GREETING_LEN];
        out[..8].copy_from_slice(&NBDMAGIC.to_be_bytes());
        out[8..16].copy_from_slice(&IHAVEOPT.to_be_bytes());
        out[16..].copy_from_slice(&self.flags.to_be_bytes());
        out
    }
    pub fn decode(bytes: &[u8]) -> Result<Self> {
        let mut r = Reader::new(bytes);
        let magic = r.u64()?;
        if magic != NBDMAGIC {
            return Err(ProtocolError::BadMagic(magic));
        }
        let magic = r.u64()?;
        if magic != IHAVEOPT {
            // Oldstyle servers send cliserv_magic here; we only speak newstyle.
            return Err(ProtocolError::BadMagic(magic));
        }
        Ok(ServerGreeting { flags: r.u16()? })
    }
}

/// The client's 32-bit flags field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientFlags(pub u32);

impl ClientFlags {
    pub fn encode(&self) -> [u8; CLIENT_FLAGS_LEN] {
        self.0.to_be_bytes()
    }
    pub fn decode(bytes: &[u8]) -> Result<Self> {
        Ok(ClientFlags(Reader::new(bytes).u32()?))
    }
    /// Validates against what the server advertised ("the server MUST drop the TCP
    /// connection if the client sets an unknown flag, or a flag that does not match
    /// something advertised") and says whether the 124 zero bytes are to be left out.
    pub fn negotiate(&self, server_flags: u16) -> Result<bool> {
        let mut allowed = client_flags::FIXED_NEWSTYLE;
        if server_flags & handshake_flags::NO_ZEROES != 0 {
            allowed |= client_flags::NO_ZEROES;
        }
        if self.0 & !allowed != 0 {
            return Err(ProtocolError::BadClientFlags { flags: self.0 });
        }
        Ok(self.0 & client_flags::NO_ZEROES != 0)
    }
}

/// The 16-byte header of an option request: IHAVEOPT, option, data length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OptionHeader {
    pub option: u32,
    pub length: u32,
}

impl OptionHeader {
    pub fn encode(&self) -> [u8; OPTION_HEADER_LEN] {
        let mut out = [0u8; OPTION_HEADER_LEN];
        out[..8].copy_from_slice(&IHAVEOPT.to_be_bytes());
        out[8..12].copy_from_slice(&self.option.to_be_bytes());
        out[12..].copy_from_slice(&self.length.to_be_bytes());
        out
    }
    pub fn decode(bytes: &[u8]) -> Result<Self> {
        let mut r = Reader::new(bytes);
        let magic = r.u64()?;
        if magic != IHAVEOPT {
            return Err(ProtocolError::BadMagic(magic));
        }
        Ok(OptionHeader { option: r.u32()?, length: r.u32()? })
    }
}

/// The data of `NBD_OPT_INFO` / `NBD_OPT_GO`: an export name and the information wanted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportQuery {
    pub name: String,
    pub info_requests: Vec<u16>,
}

impl ExportQuery {
    fn encode_data(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(4 + self.name.len() + 2 + 2 * self.info_requests.len());
        out.extend_from_slice(&u32_len(self.name.len()).to_be_bytes());
        out.extend_from_slice(self.name.as_bytes());
        // The count is 16 bits on the wire; more requests than that cannot be expressed.
        let n = self.info_requests.len().min(u16::MAX as usize);
        out.extend_from_slice(&(n as u16).to_be_bytes());
        for r in &self.info_requests[..n] {
            out.extend_from_slice(&r.to_be_bytes());
        }
        out
    }
    fn decode_data(data: &[u8]) -> Result<Self> {
        let what = "NBD_OPT_INFO/GO data";
        let mut r = Reader::new(data);
        let name_len = r.u32()? as usize;
        // "MUST be no larger than the option data length - 6".
        if name_len > data.len().saturating_sub(6) {
            return Err(ProtocolError::Malformed { what, why: "name length exceeds option data" });
        }
        let name = decode_string(r.take(name_len)?)?;
        let count = r.u16()? as usize;
        if r.remaining() != count * 2 {
            return Err(ProtocolError::Malformed { what, why: "information request count does not match length" });
        }
        let mut info_requests = Vec::with_capacity(count);
        for _ in 0..count {
            info_requests.push(r.u16()?);
        }
        Ok(ExportQuery { name, info_requests })
    }
}

/// An option request, decoded. Options this server does not implement are kept as
/// `Other` so they can be answered with `NBD_REP_ERR_UNSUP`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OptionRequest {
    ExportName(String),
    Abort,
    List,
    Info(ExportQuery),
    Go(ExportQuery),
    StructuredReply,
    Other { option: u32, data: Vec<u8> },
}

impl OptionRequest {
    pub fn option_code(&self) -> u32 {
        match self {
            OptionRequest::ExportName(_) => opt::EXPORT_NAME,
            OptionRequest::Abort => opt::ABORT,
            OptionRequest::List => opt::LIST,
            OptionRequest::Info(_) => opt::INFO,
            OptionRequest::Go(_) => opt::GO,
            OptionRequest::StructuredReply => opt::STRUCTURED_REPLY,
            OptionRequest::Other { option, .. } => *option,
        }
    }

    /// The whole message: header and data.
    pub fn encode(&self) -> Vec<u8> {
        let data = match self {
            OptionRequest::ExportName(name) => name.as_bytes().to_vec(),
            OptionRequest::Abort | OptionRequest::List | OptionRequest::StructuredReply => Vec::new(),
            OptionRequest::Info(q) | OptionRequest::Go(q) => q.encode_data(),
            OptionRequest::Other { data, .. } => data.clone(),
        };
        let mut out = OptionHeader { option: self.option_code(), length: u32_len(data.len()) }.encode().to_vec();
        out.extend_from_slice(&data);
        out
    }

    /// Decodes the data of option `option` (the header has already been read).
    pub fn decode(option: u32, data: &[u8]) -> Result<Self> {
        Ok(match option {
            opt::EXPORT_NAME => OptionRequest::ExportName(decode_string(data)?),
            // "a server SHOULD ignore any data sent by the client rather than rejecting".
            opt::ABORT => OptionRequest::Abort,
            opt::LIST if data.is_empty() => OptionRequest::List,
            opt::LIST => return Err(ProtocolError::Malformed { what: "NBD_OPT_LIST", why: "carries data" }),
            opt::INFO => OptionRequest::Info(ExportQuery::decode_data(data)?),
            opt::GO => OptionRequest::Go(ExportQuery::decode_data(data)?),
            opt::STRUCTURED_REPLY if data.is_empty() => OptionRequest::StructuredReply,
            opt::STRUCTURED_REPLY => return Err(ProtocolError::Malformed { what: "NBD_OPT_STRUCTURED_REPLY", why: "carries data" }),
            other => OptionRequest::Other { option: other, data: data.to_vec() },
        })
    }

    /// Decodes one whole message (header and data) from the front of `bytes`; returns it
    /// and the number of bytes it used.
    pub fn decode_message(bytes: &[u8]) -> Result<(Self, usize)> {
        let header = OptionHeader::decode(bytes)?;
        let mut r = Reader::new(bytes);
        r.take(OPTION_HEADER_LEN)?;
        let data = r.take(header.length as usize)?;
        Ok((OptionRequest::decode(header.option, data)?, OPTION_HEADER_LEN + data.len()))
    }
}

/// One fixed-newstyle option reply: magic, option, reply type, length, data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OptionReply {
    pub option: u32,
    pub reply_type: u32,
    pub data: Vec<u8>,
}

impl OptionReply {
    pub fn ack(option: u32) -> Self {
        OptionReply { option, reply_type: rep::ACK, data: Vec::new() }
    }
    /// An error reply carrying a human-readable message.
    pub fn error(option: u32, reply_type: u32, message: &str) -> Self {
        OptionReply { option, reply_type, data: sanitize_string(message).into_bytes() }
    }
    pub fn server(option: u32, entry: &ServerEntry) -> Self {
        OptionReply { option, reply_type: rep::SERVER, data: entry.encode() }
    }
    pub fn info(option: u32, info: &Info) -> Self {
        OptionReply { option, reply_type: rep::INFO, data: info.encode() }
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(OPTION_REPLY_HEADER_LEN + self.data.len());
        out.extend_from_slice(&OPTION_REPLY_MAGIC.to_be_bytes());
        out.extend_from_slice(&self.option.to_be_bytes());
        out.extend_from_slice(&self.reply_type.to_be_bytes());
        out.extend_from_slice(&u32_len(self.data.len()).to_be_bytes());
        out.extend_from_slice(&self.data);
        out
    }

    /// Decodes one reply from the front of `bytes`; returns it and the bytes it used.
    pub fn decode(bytes: &[u8]) -> Result<(Self, usize)> {
        let mut r = Reader::new(bytes);
        let magic = r.u64()?;
        if magic != OPTION_REPLY_MAGIC {
            return Err(ProtocolError::BadMagic(magic));
        }
        let option = r.u32()?;
        let reply_type = r.u32()?;
        let len = r.u32()? as usize;
        let data = r.take(len)?.to_vec();
        Ok((OptionReply { option, reply_type, data }, OPTION_REPLY_HEADER_LEN + len))
    }
}

/// The payload of `NBD_REP_SERVER`: an export name and optional human-readable details.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerEntry {
    pub name: String,
    pub details: String,
}

impl ServerEntry {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(4 + self.name.len() + self.details.len());
        out.extend_from_slice(&u32_len(self.name.len()).to_be_bytes());
        out.extend_from_slice(self.name.as_bytes());
        out.extend_from_slice(self.details.as_bytes());
        out
    }
    pub fn decode(data: &[u8]) -> Result<Self> {
        let mut r = Reader::new(data);
        let len = r.u32()? as usize;
        let name = decode_string(r.take(len)?)?;
        let details = decode_string(r.rest())?;
        Ok(ServerEntry { name, details })
    }
}

/// The payload of `NBD_REP_INFO`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Info {
    Export {
        size: u64,
        flags: u16,
    },
    Name(String),
    Description(String),
    BlockSize {
        minimum: u32,
        preferred: u32,
        maximum: u32,
    },
    /// A type this decoder does not know ("the client MUST ignore" it).
    Other {
        info_type: u16,
        data: Vec<u8>,
    },
}

impl Info {
    pub fn info_type(&self) -> u16 {
        match self {
            Info::Export { .. } => info::EXPORT,
            Info::Name(_) => info::NAME,
            Info::Description(_) => info::DESCRIPTION,
            Info::BlockSize { .. } => info::BLOCK_SIZE,
            Info::Other { info_type, .. } => *info_type,
        }
    }
    pub fn encode(&self) -> Vec<u8> {
        let mut out = self.info_type().to_be_bytes().to_vec();
        match self {
            Info::Export { size, flags } => {
                out.extend_from_slice(&size.to_be_bytes());
                out.extend_from_slice(&flags.to_be_bytes());
            }
            Info::Name(s) | Info::Description(s) => out.extend_from_slice(s.as_bytes()),
            Info::BlockSize { minimum, preferred, maximum } => {
                out.extend_from_slice(&minimum.to_be_bytes());
                out.extend_from_slice(&preferred.to_be_bytes());
                out.extend_from_slice(&maximum.to_be_bytes());
            }
            Info::Other { data, .. } => out.extend_from_slice(data),
        }
        out
    }
    pub fn decode(data: &[u8]) -> Result<Self> {
        let mut r = Reader::new(data);
        let info_type = r.u16()?;
        let exact = |want: usize, have: usize, what| {
            if want == have {
                Ok(())
            } else {
                Err(ProtocolError::Malformed { what, why: "wrong length" })
            }
        };
        Ok(match info_type {
            info::EXPORT => {
                exact(12, data.len(), "NBD_INFO_EXPORT")?;
                Info::Export { size: r.u64()?, flags: r.u16()? }
            }
            info::NAME => Info::Name(decode_string(r.rest())?),
            info::DESCRIPTION => Info::Description(decode_string(r.rest())?),
            info::BLOCK_SIZE => {
                exact(14, data.len(), "NBD_INFO_BLOCK_SIZE")?;
                Info::BlockSize { minimum: r.u32()?, preferred: r.u32()?, maximum: r.u32()? }
            }
            other => Info::Other { info_type: other, data: r.rest().to_vec() },
        })
    }
}

/// The server's answer to `NBD_OPT_EXPORT_NAME`: size, transmission flags, and (unless
/// `NBD_FLAG_C_NO_ZEROES` was negotiated) 124 reserved zero bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExportNameReply {
    pub size: u64,
    pub flags: u16,
}

impl ExportNameReply {
    pub fn encode(&self, no_zeroes: bool) -> Vec<u8> {
        let len = if no_zeroes { EXPORT_NAME_REPLY_LEN_NO_ZEROES } else { EXPORT_NAME_REPLY_LEN };
        let mut out = vec![0u8; len];
        out[..8].copy_from_slice(&self.size.to_be_bytes());
        out[8..10].copy_from_slice(&self.flags.to_be_bytes());
        out
    }
    pub fn decode(bytes: &[u8]) -> Result<Self> {
        let mut r = Reader::new(bytes);
        Ok(ExportNameReply { size: r.u64()?, flags: r.u16()? })
    }
}

// ---------------------------------------------------------------------- transmission

/// A command type, decoded; unknown values are kept so they can be refused with EINVAL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    Read,
    Write,
    Disc,
    Flush,
    Trim,
    Cache,
    WriteZeroes,
    BlockStatus,
    Unknown(u16),
}

impl From<u16> for Command {
    fn from(v: u16) -> Self {
        match v {
            cmd::READ => Command::Read,
            cmd::WRITE => Command::Write,
            cmd::DISC => Command::Disc,
            cmd::FLUSH => Command::Flush,
            cmd::TRIM => Command::Trim,
            cmd::CACHE => Command::Cache,
            cmd::WRITE_ZEROES => Command::WriteZeroes,
            cmd::BLOCK_STATUS => Command::BlockStatus,
            other => Command::Unknown(other),
        }
    }
}

impl From<Command> for u16 {
    fn from(c: Command) -> u16 {
        match c {
            Command::Read => cmd::READ,
            Command::Write => cmd::WRITE,
            Command::Disc => cmd::DISC,
            Command::Flush => cmd::FLUSH,
            Command::Trim => cmd::TRIM,
            Command::Cache => cmd::CACHE,
            Command::WriteZeroes => cmd::WRITE_ZEROES,
            Command::BlockStatus => cmd::BLOCK_STATUS,
            Command::Unknown(v) => v,
        }
    }
}

/// The 28-byte request header. `command` is kept raw so every header round-trips.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestHeader {
    pub flags: u16,
    pub command: u16,
    pub cookie: u64,
    pub offset: u64,
    pub length: u32,
}

impl RequestHeader {
    pub fn encode(&self) -> [u8; REQUEST_LEN] {
        let mut out = [0u8; REQUEST_LEN];
        out[..4].copy_from_slice(&REQUEST_MAGIC.to_be_bytes());
        out[4..6].copy_from_slice(&self.flags.to_be_bytes());
        out[6..8].copy_from_slice(&self.command.to_be_bytes());
        out[8..16].copy_from_slice(&self.cookie.to_be_bytes());
        out[16..24].copy_from_slice(&self.offset.to_be_bytes());
        out[24..].copy_from_slice(&self.length.to_be_bytes());
        out
    }
    pub fn decode(bytes: &[u8]) -> Result<Self> {
        let mut r = Reader::new(bytes);
        let magic = r.u32()?;
        if magic != REQUEST_MAGIC {
            return Err(ProtocolError::BadMagic(magic as u64));
        }
        Ok(RequestHeader { flags: r.u16()?, command: r.u16()?, cookie: r.u64()?, offset: r.u64()?, length: r.u32()? })
    }
    pub fn command(&self) -> Command {
        Command::from(self.command)
    }
    /// Bytes of data that follow this header on the wire: a WRITE carries `length` bytes
    /// whether or not the server will accept it, so the stream stays in step.
    pub fn payload_len(&self) -> u32 {
        if self.command == cmd::WRITE {
            self.length
        } else {
            0
        }
    }
}

/// The 16-byte simple reply header (a successful READ's data follows it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SimpleReply {
    pub error: u32,
    pub cookie: u64,
}

impl SimpleReply {
    pub fn encode(&self) -> [u8; SIMPLE_REPLY_LEN] {
        let mut out = [0u8; SIMPLE_REPLY_LEN];
        out[..4].copy_from_slice(&SIMPLE_REPLY_MAGIC.to_be_bytes());
        out[4..8].copy_from_slice(&self.error.to_be_bytes());
        out[8..].copy_from_slice(&self.cookie.to_be_bytes());
        out
    }
    pub fn decode(bytes: &[u8]) -> Result<Self> {
        let mut r = Reader::new(bytes);
        let magic = r.u32()?;
        if magic != SIMPLE_REPLY_MAGIC {
            return Err(ProtocolError::BadMagic(magic as u64));
        }
        Ok(SimpleReply { error: r.u32()?, cookie: r.u64()? })
    }
}

/// What the server knows about an export when judging a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExportLimits {
    pub size: u64,
    pub read_only: bool,
    pub max_payload: u32,
}

/// Transmission flags for an export: only what the server honours. FLUSH is always
/// honoured (nothing to do on a read-only export); FUA, TRIM (done as zeroing, so trimmed
/// data reads back as zeros) and WRITE_ZEROES only when writes are allowed; MULTI_CONN
/// because `Array::flush` makes every acknowledged write durable, whichever connection
/// wrote it.
pub fn transmission_flags(read_only: bool) -> u16 {
    use transmission_flags::*;
    let mut flags = HAS_FLAGS | SEND_FLUSH | CAN_MULTI_CONN;
    if read_only {
        flags |= READ_ONLY;
    } else {
        flags |= SEND_FUA | SEND_TRIM | SEND_WRITE_ZEROES;
    }
    flags
}

/// A request the server will carry out (all checks passed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Validated {
    Read {
        offset: u64,
        length: u32,
    },
    Write {
        offset: u64,
        length: u32,
        fua: bool,
    },
    Flush,
    /// TRIM and WRITE_ZEROES: afterwards the range reads as zeros. `may_discard`: the
    /// server may free the space (TRIM, or WRITE_ZEROES without NO_HOLE) — the array then
    /// discards on mirror/stripe members and writes zeros on parity levels.
    Zero {
        offset: u64,
        length: u32,
        fua: bool,
        may_discard: bool,
    },
    Disconnect,
}

/// Judges a request header against an export, following proto.md's error rules: unknown
/// commands and flags → EINVAL; writes on a read-only export → EPERM; READ/WRITE payloads
/// over the maximum → EINVAL (the doc reserves EOVERFLOW for structured/DF and payload-less
/// commands); ranges past the end → ENOSPC for WRITE/WRITE_ZEROES, EINVAL for READ/TRIM.
/// Returns the NBD error value to reply with on refusal.
pub fn validate_request(req: &RequestHeader, limits: &ExportLimits) -> std::result::Result<Validated, u32> {
    let command = req.command();
    let fua = req.flags & cmd_flags::FUA != 0;
    // FUA "is valid for all commands"; NO_HOLE only for WRITE_ZEROES. DF, REQ_ONE and
    // FAST_ZERO belong to features this server does not advertise.
    let allowed = match command {
        Command::WriteZeroes => cmd_flags::FUA | cmd_flags::NO_HOLE,
        _ => cmd_flags::FUA,
    };
    match command {
        Command::Disc => return Ok(Validated::Disconnect),
        Command::Unknown(_) | Command::Cache | Command::BlockStatus => return Err(errno::EINVAL),
        _ => {}
    }
    if req.flags & !allowed != 0 {
        return Err(errno::EINVAL);
    }
    let writes = matches!(command, Command::Write | Command::Trim | Command::WriteZeroes);
    if writes && limits.read_only {
        return Err(errno::EPERM);
    }
    if matches!(command, Command::Read | Command::Write) && req.length > limits.max_payload {
        return Err(errno::EINVAL);
    }
    let in_range = req.offset.checked_add(req.length as u64).is_some_and(|end| end <= limits.size);
    match command {
        Command::Flush if req.offset != 0 || req.length != 0 => Err(errno::EINVAL),
        Command::Flush => Ok(Validated::Flush),
        Command::Read if !in_range => Err(errno::EINVAL),
        Command::Read => Ok(Validated::Read { offset: req.offset, length: req.length }),
        Command::Write if !in_range => Err(errno::ENOSPC),
        Command::Write => Ok(Validated::Write { offset: req.offset, length: req.length, fua }),
        Command::Trim if !in_range => Err(errno::EINVAL),
        Command::WriteZeroes if !in_range => Err(errno::ENOSPC),
        Command::Trim | Command::WriteZeroes => Ok(Validated::Zero {
            offset: req.offset,
            length: req.length,
            fua,
            may_discard: command == Command::Trim || req.flags & cmd_flags::NO_HOLE == 0,
        }),
        // Handled above; listed so a new Command variant is a compile error here.
        Command::Disc | Command::Unknown(_) | Command::Cache | Command::BlockStatus => Err(errno::EINVAL),
    }
}

/// The fuzzing oracle (used by `fuzz/fuzz_targets/nbd_request.rs` and the property
/// tests): feeds `data` to the handshake-option and request decoders the way the server
/// does, and panics only if an invariant breaks — a decoded message that does not
/// re-encode to an equal one, a claimed length beyond the input, or an accepted request
/// outside the export.
#[doc(hidden)]
pub fn check_decoders(data: &[u8]) {
    // Client flags, then a stream of option messages, as the handshake reads them.
    if let Ok(flags) = ClientFlags::decode(data) {
        let _ = flags.negotiate(handshake_flags::FIXED_NEWSTYLE | handshake_flags::NO_ZEROES);
    }
    let mut rest = data;
    while let Ok((req, used)) = OptionRequest::decode_message(rest) {
        assert!(used >= OPTION_HEADER_LEN && used <= rest.len(), "option claims {used} of {} bytes", rest.len());
        let again = OptionRequest::decode_message(&req.encode()).map(|r| r.0);
        assert_eq!(again.as_ref(), Ok(&req), "option does not round-trip");
        rest = &rest[used..];
    }
    // The option data decoders on their own, for every option the server knows.
    if let Some((code, body)) = data.split_first() {
        let option = [opt::EXPORT_NAME, opt::ABORT, opt::LIST, opt::INFO, opt::GO, opt::STRUCTURED_REPLY][*code as usize % 6];
        if let Ok(req) = OptionRequest::decode(option, body) {
            let again = OptionRequest::decode_message(&req.encode()).map(|r| r.0);
            assert_eq!(again.as_ref(), Ok(&req), "option data does not round-trip");
        }
    }
    let _ = Info::decode(data);
    let _ = ServerEntry::decode(data);
    // A stream of requests as the transmission phase reads them: header, then the
    // payload of a WRITE skipped; judged against a small export.
    let limits = ExportLimits { size: 1 << 30, read_only: data.first().is_some_and(|b| b & 1 == 1), max_payload: MAX_PAYLOAD };
    let mut rest = data;
    while let Ok(req) = RequestHeader::decode(rest) {
        assert_eq!(RequestHeader::decode(&req.encode()), Ok(req));
        if let Ok(v) = validate_request(&req, &limits) {
            let end = |offset: u64, length: u32| offset.checked_add(length as u64).is_some_and(|e| e <= limits.size);
            match v {
                Validated::Read { offset, length } | Validated::Write { offset, length, .. } => {
                    assert!(length <= limits.max_payload && end(offset, length), "accepted {req:?}");
                }
                Validated::Zero { offset, length, .. } => assert!(end(offset, length), "accepted {req:?}"),
                Validated::Flush | Validated::Disconnect => {}
            }
            assert!(!(limits.read_only && matches!(v, Validated::Write { .. } | Validated::Zero { .. })));
        }
        let skip = REQUEST_LEN.saturating_add(req.payload_len() as usize);
        if skip > rest.len() {
            break;
        }
        rest = &rest[skip..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greeting_bytes_match_the_doc() {
        let g = ServerGreeting { flags: handshake_flags::FIXED_NEWSTYLE | handshake_flags::NO_ZEROES }.encode();
        assert_eq!(&g[..8], b"NBDMAGIC");
        assert_eq!(&g[8..16], b"IHAVEOPT");
        assert_eq!(&g[16..], &[0, 3]);
    }

    #[test]
    fn client_flags_rules() {
        let both = handshake_flags::FIXED_NEWSTYLE | handshake_flags::NO_ZEROES;
        assert_eq!(ClientFlags(1).negotiate(both), Ok(false));
        assert_eq!(ClientFlags(3).negotiate(both), Ok(true));
        assert_eq!(ClientFlags(0).negotiate(both), Ok(false));
        assert!(ClientFlags(4).negotiate(both).is_err());
        assert!(ClientFlags(2).negotiate(handshake_flags::FIXED_NEWSTYLE).is_err());
    }

    #[test]
    fn info_query_length_rules() {
        // name length larger than data - 6 is refused even if the bytes exist.
        let mut d = 5u32.to_be_bytes().to_vec();
        d.extend_from_slice(b"abcde");
        d.extend_from_slice(&0u16.to_be_bytes());
        assert!(OptionRequest::decode(opt::GO, &d).is_ok());
        d.push(0);
        assert!(OptionRequest::decode(opt::GO, &d).is_err(), "trailing byte");
        assert!(OptionRequest::decode(opt::GO, &d[..d.len() - 2]).is_err(), "short");
        assert!(OptionRequest::decode(opt::LIST, b"x").is_err());
        assert_eq!(OptionRequest::decode(opt::ABORT, b"x"), Ok(OptionRequest::Abort));
    }

    #[test]
    fn validation_errors_follow_the_doc() {
        let l = ExportLimits { size: 1 << 20, read_only: false, max_payload: MAX_PAYLOAD };
        let req = |command, flags, offset, length| RequestHeader { flags, command, cookie: 9, offset, length };
        assert_eq!(validate_request(&req(cmd::READ, 0, 0, 4096), &l), Ok(Validated::Read { offset: 0, length: 4096 }));
        assert_eq!(validate_request(&req(cmd::READ, 0, 1 << 20, 1), &l), Err(errno::EINVAL));
        assert_eq!(validate_request(&req(cmd::WRITE, 0, (1 << 20) - 1, 2), &l), Err(errno::ENOSPC));
        assert_eq!(validate_request(&req(cmd::WRITE_ZEROES, 0, u64::MAX, 2), &l), Err(errno::ENOSPC));
        assert_eq!(validate_request(&req(cmd::TRIM, 0, u64::MAX, 2), &l), Err(errno::EINVAL));
        assert_eq!(validate_request(&req(cmd::READ, 0, 0, MAX_PAYLOAD + 1), &l), Err(errno::EINVAL));
        assert_eq!(validate_request(&req(99, 0, 0, 0), &l), Err(errno::EINVAL));
        assert_eq!(validate_request(&req(cmd::WRITE, cmd_flags::NO_HOLE, 0, 1), &l), Err(errno::EINVAL));
        assert_eq!(validate_request(&req(cmd::WRITE_ZEROES, cmd_flags::FAST_ZERO, 0, 1), &l), Err(errno::EINVAL));
        assert_eq!(
            validate_request(&req(cmd::WRITE_ZEROES, cmd_flags::NO_HOLE | cmd_flags::FUA, 0, 1), &l),
            Ok(Validated::Zero { offset: 0, length: 1, fua: true, may_discard: false })
        );
        assert_eq!(
            validate_request(&req(cmd::TRIM, 0, 0, 1), &l),
            Ok(Validated::Zero { offset: 0, length: 1, fua: false, may_discard: true })
        );
        assert_eq!(validate_request(&req(cmd::FLUSH, 0, 1, 0), &l), Err(errno::EINVAL));
        assert_eq!(validate_request(&req(cmd::DISC, 0, 0, 0), &l), Ok(Validated::Disconnect));
        let ro = ExportLimits { read_only: true, ..l };
        assert_eq!(validate_request(&req(cmd::WRITE, 0, 0, 1), &ro), Err(errno::EPERM));
        assert_eq!(validate_request(&req(cmd::TRIM, 0, 0, 1), &ro), Err(errno::EPERM));
        assert_eq!(validate_request(&req(cmd::FLUSH, 0, 0, 0), &ro), Ok(Validated::Flush));
    }

    #[test]
    fn flags_advertised() {
        use transmission_flags::*;
        let rw = transmission_flags(false);
        assert_eq!(rw, HAS_FLAGS | SEND_FLUSH | SEND_FUA | SEND_TRIM | SEND_WRITE_ZEROES | CAN_MULTI_CONN);
        assert_eq!(transmission_flags(true), HAS_FLAGS | READ_ONLY | SEND_FLUSH | CAN_MULTI_CONN);
    }
}
