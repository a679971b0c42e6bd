//! Policy model (placeholder).
