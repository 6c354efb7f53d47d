//! SVG flame graphs of folded stacks, drawn by inferno.

use inferno::flamegraph::{self, Options};

/// An interactive SVG flame graph of `folded_lines` (`outer;…;inner count`). Colors
/// follow the function names, so the same input draws the same picture.
pub fn flamegraph_svg(title: &str, folded_lines: &[String]) -> Result<Vec<u8>, String> {
    let mut options = Options::default();
    options.title = title.to_string();
    options.hash = true;
    let mut svg = Vec::new();
    flamegraph::from_lines(&mut options, folded_lines.iter().map(String::as_str), &mut svg)
        .map_err(|e| format!("cannot draw a flame graph: {e}"))?;
    Ok(svg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_svg_names_the_hot_function() {
        let lines = ["main;work;hot_loop 90".to_string(), "main;idle 10".to_string()];
        let svg = String::from_utf8(flamegraph_svg("CPU <profile>", &lines).unwrap()).unwrap();
        assert!(svg.contains("<svg"), "{svg}");
        assert!(svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains("<title>hot_loop (90 samples, 90.00%)</title>"), "{svg}");
        assert!(svg.contains("CPU &lt;profile&gt;"), "the title is escaped");
        assert_eq!(flamegraph_svg("CPU <profile>", &lines).unwrap(), svg.into_bytes(), "deterministic");
    }

    #[test]
    fn nothing_to_draw_is_an_error() {
        let err = flamegraph_svg("t", &[]).unwrap_err();
        assert!(err.contains("No stack counts found"), "{err}");
    }
}
