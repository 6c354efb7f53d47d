//! Calendar dates and times of day from seconds since the Unix epoch, for plugins that
//! print timestamps (the sandbox has no clock library and no time zones).

/// A moment as a calendar shows it, in whatever zone the seconds were counted in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Civil {
    pub year: i64,
    /// 1 to 12.
    pub month: u32,
    /// 1 to 31.
    pub day: u32,
    pub hour: u32,
    pub minute: u32,
    pub second: u32,
    /// Day of the year, 1 to 366.
    pub yday: u32,
    /// Day of the week, 0 for Sunday.
    pub wday: u32,
}

/// `secs` since 1970-01-01 00:00:00 (negative before it) as a calendar date and a time of
/// day (Howard Hinnant's `civil_from_days`).
///
/// ```
/// let c = wasmtap_sdk::civil(951_782_400);
/// assert_eq!((c.year, c.month, c.day, c.yday, c.wday), (2000, 2, 29, 60, 2));
/// ```
pub fn civil(secs: i64) -> Civil {
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy_mar = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy_mar + 2) / 153;
    let day = doy_mar - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let before = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334][(month - 1) as usize];
    Civil {
        year,
        month: month as u32,
        day: day as u32,
        hour: (sod / 3600) as u32,
        minute: (sod / 60 % 60) as u32,
        second: (sod % 60) as u32,
        yday: (before + day + i64::from(leap && month > 2)) as u32,
        wday: (days + 4).rem_euclid(7) as u32,
    }
}
