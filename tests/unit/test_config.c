/* Unit tests of relay/config/: defaults, the INI file, overrides, every
 * rejection a user can run into, redaction and the dump. The environment's
 * layer: test_config_env.c. */
#include "config_fixture.h"

/* --- defaults and parsing ------------------------------------------------ */

Test(config, defaults)
{
    cr_assert_str_eq(cfg.pg_conninfo, "");
    cr_assert_eq(cfg.n_kafka, 0);
    cr_assert_str_eq(cfg.schema, "public");
    cr_assert_str_eq(cfg.table, "outbox");
    cr_assert_str_eq(cfg.topic, "outbox.${aggregate_type}");
    cr_assert_str_eq(cfg.notify_channel, "outbox_relay");
    cr_assert_eq(cfg.batch_size, 2000);
    cr_assert_eq(cfg.poll_interval_ms, 1000);
    cr_assert_eq(cfg.shutdown_timeout_ms, 10000);
    cr_assert_eq(cfg.reconnect_interval_ms, 1000);
    cr_assert_str_eq(cfg.http_listen, "127.0.0.1:8423");
    cr_assert_eq(cfg.log_level, LOG_LVL_INFO);
    cr_assert_eq(cfg.log_format, LOG_FORMAT_LOGFMT);
    cr_assert_eq(config_validate(&cfg, err, sizeof err), 0);
}

/* Choices and durations are parsed once, into enums and milliseconds. */
Test(config, typed_defaults)
{
    cr_assert_eq(cfg.on_sent, RELAY_ON_SENT_MARK);
    cr_assert_eq(cfg.on_poison, POISON_HOLD_AGGREGATE);
    cr_assert_eq(cfg.fencing, RELAY_FENCING_TRANSACTIONAL);
    cr_assert_eq(cfg.retention_ms, 7LL * 86400 * 1000);
    cr_assert_eq(cfg.log_stats_interval_ms, 10000);
    cr_assert_eq(cfg.verify_interval_ms, 0);
    cr_assert_eq(cfg.verify_lag_ms, 300000);
    cr_assert_eq(cfg.verify_window_ms, 3600000);
    cr_assert_eq(cfg.allow_row_security, 0);
}

Test(config, every_choice_parses_into_its_enum)
{
    static const struct { const char *key, *value; size_t offset; int want; } cases[] = {
        {"on_sent", "delete", offsetof(struct relay_config, on_sent), RELAY_ON_SENT_DELETE},
        {"on_sent", "mark", offsetof(struct relay_config, on_sent), RELAY_ON_SENT_MARK},
        {"fencing", "none", offsetof(struct relay_config, fencing), RELAY_FENCING_NONE},
        {"fencing", "transactional", offsetof(struct relay_config, fencing), RELAY_FENCING_TRANSACTIONAL},
        {"on_poison", "dead_letter", offsetof(struct relay_config, on_poison), POISON_DEAD_LETTER},
        {"on_poison", "halt", offsetof(struct relay_config, on_poison), POISON_HALT},
        {"on_poison", "hold_aggregate", offsetof(struct relay_config, on_poison), POISON_HOLD_AGGREGATE},
        {"allow_row_security", "true", offsetof(struct relay_config, allow_row_security), 1},
        {"allow_row_security", "false", offsetof(struct relay_config, allow_row_security), 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cr_assert_eq(config_set(&cfg, "relay", cases[i].key, cases[i].value, err, sizeof err), 0,
                     "%s=%s: %s", cases[i].key, cases[i].value, err);
        int got = *(const int *)((const char *)&cfg + cases[i].offset);
        cr_assert_eq(got, cases[i].want, "%s=%s gave %d", cases[i].key, cases[i].value, got);
    }
    cr_assert_eq(config_set(&cfg, "log", "format", "json", err, sizeof err), 0);
    cr_assert_eq(cfg.log_format, LOG_FORMAT_JSON);
    cr_assert_eq(config_set(&cfg, "log", "level", "debug", err, sizeof err), 0);
    cr_assert_eq(cfg.log_level, LOG_LVL_DEBUG);
}

Test(config, a_wrong_choice_names_the_key_and_what_is_allowed)
{
    cr_assert_eq(config_set(&cfg, "relay", "on_sent", "Delete", err, sizeof err), -EINVAL);
    cr_assert(strstr(err, "relay.on_sent") && strstr(err, "allowed: mark, delete"), "%s", err);
    cr_assert_eq(cfg.on_sent, RELAY_ON_SENT_MARK, "a refused value changed the field");
    cr_assert_eq(config_set(&cfg, "relay", "fencing", "", err, sizeof err), -EINVAL);
    cr_assert(strstr(err, "relay.fencing"), "%s", err);
}

Test(config, durations_become_milliseconds_and_are_written_back_as_given)
{
    static const struct { const char *text; long long ms; const char *back; } cases[] = {
        {"0", 0, "0"},          {"90", 90000, "90s"},        {"90s", 90000, "90s"},
        {"15m", 900000, "15m"}, {"12h", 43200000, "12h"},    {"7d", 604800000, "7d"},
        {"60m", 3600000, "1h"}, {"86400", 86400000, "1d"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cr_assert_eq(config_set(&cfg, "relay", "retention", cases[i].text, err, sizeof err), 0,
                     "%s: %s", cases[i].text, err);
        cr_assert_eq(cfg.retention_ms, cases[i].ms, "%s gave %lld ms", cases[i].text,
                     (long long)cfg.retention_ms);
        char buf[32];
        config_format_duration(cfg.retention_ms, buf, sizeof buf);
        cr_assert_str_eq(buf, cases[i].back);
    }
    static const char *const bad[] = {"7 d", "-1s", "1w", "1.5h", "", "s", "1000000d"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cr_assert_eq(config_set(&cfg, "log", "stats_interval", bad[i], err, sizeof err), -EINVAL,
                     "\"%s\" was taken", bad[i]);
        cr_assert(strstr(err, "log.stats_interval") && strstr(err, "not a duration"), "%s", err);
    }
    cr_assert_eq(cfg.log_stats_interval_ms, 10000, "a refused value changed the field");
}

Test(config, every_row_documents_its_type_and_unit)
{
    struct config_param_info info;
    for (size_t i = 0; config_param_info(i, &info); i++) {
        cr_assert(info.type && *info.type, "%s.%s has no type", info.section, info.key);
        if (info.is_int)
            cr_assert(*info.unit, "%s.%s: an integer without a unit", info.section, info.key);
        if (!strcmp(info.type, "choice"))
            cr_assert(info.choices && info.choices[0], "%s.%s: a choice without choices",
                      info.section, info.key);
    }
}

Test(config, free_is_safe_on_zeroed_and_twice)
{
    struct relay_config z;
    memset(&z, 0, sizeof z);
    config_free(&z);
    config_free(&cfg);
    config_free(&cfg);
}

Test(config, file_sets_every_section)
{
    int rc = load_text("; a comment\n"
                       "# another comment\n"
                       "[postgres]\n"
                       "conninfo = host=db dbname=app\n"
                       "\n"
                       "[kafka]\n"
                       "bootstrap.servers = k1:9092,k2:9092\n"
                       "linger.ms = 5\n"
                       "\n"
                       "[relay]\n"
                       "  schema = app\n" /* indented keys are keys, not continuations */
                       "  table = events\n"
                       "topic = ${aggregate_type}.${event_type}\n"
                       "notify_channel = app_events\n"
                       "batch_size = 250\n"
                       "poll_interval_ms = 500\n"
                       "shutdown_timeout_ms = 0\n"
                       "reconnect_interval_ms = 2000\n"
                       "[http]\n"
                       "listen = 127.0.0.1:9100\n"
                       "[log]\n"
                       "level = debug\n"
                       "format = json\n",
                       NULL, 0);
    cr_assert_eq(rc, 0, "%s", err);
    cr_assert_str_eq(cfg.pg_conninfo, "host=db dbname=app");
    cr_assert_eq(cfg.n_kafka, 2);
    cr_assert_str_eq(cfg.kafka[0].key, "bootstrap.servers");
    cr_assert_str_eq(cfg.kafka[0].value, "k1:9092,k2:9092");
    cr_assert_str_eq(cfg.kafka[1].key, "linger.ms");
    cr_assert_str_eq(cfg.kafka[1].value, "5");
    cr_assert_str_eq(cfg.schema, "app");
    cr_assert_str_eq(cfg.table, "events");
    cr_assert_str_eq(cfg.topic, "${aggregate_type}.${event_type}");
    cr_assert_str_eq(cfg.notify_channel, "app_events");
    cr_assert_eq(cfg.batch_size, 250);
    cr_assert_eq(cfg.poll_interval_ms, 500);
    cr_assert_eq(cfg.shutdown_timeout_ms, 0);
    cr_assert_eq(cfg.reconnect_interval_ms, 2000);
    cr_assert_str_eq(cfg.http_listen, "127.0.0.1:9100");
    cr_assert_eq(cfg.log_level, LOG_LVL_DEBUG);
    cr_assert_eq(cfg.log_format, LOG_FORMAT_JSON);
}

Test(config, overrides_win_over_file_in_order)
{
    char *const ov[] = {"relay.batch_size=10", "relay.batch_size=20", "log.level=warn"};
    int rc = load_text("[relay]\nbatch_size = 5\ntable = events\n[log]\nlevel = debug\n", ov, 3);
    cr_assert_eq(rc, 0, "%s", err);
    cr_assert_eq(cfg.batch_size, 20);
    cr_assert_str_eq(cfg.table, "events");
    cr_assert_eq(cfg.log_level, LOG_LVL_WARN);
}

Test(config, override_kafka_key_with_dots)
{
    cr_assert_eq(load_override("kafka.bootstrap.servers=host:9092"), 0, "%s", err);
    cr_assert_eq(cfg.n_kafka, 1);
    cr_assert_str_eq(cfg.kafka[0].key, "bootstrap.servers");
    cr_assert_str_eq(cfg.kafka[0].value, "host:9092");
}

Test(config, override_value_may_contain_equals_and_dots)
{
    cr_assert_eq(load_override("postgres.conninfo=host=a.example dbname=x"), 0, "%s", err);
    cr_assert_str_eq(cfg.pg_conninfo, "host=a.example dbname=x");
}

Test(config, later_kafka_key_replaces_earlier_in_place)
{
    char *const ov[] = {"kafka.linger.ms=50"};
    int rc = load_text("[kafka]\nlinger.ms = 5\nclient.id = relay\n", ov, 1);
    cr_assert_eq(rc, 0, "%s", err);
    cr_assert_eq(cfg.n_kafka, 2);
    cr_assert_str_eq(cfg.kafka[0].key, "linger.ms");
    cr_assert_str_eq(cfg.kafka[0].value, "50");
    cr_assert_str_eq(kafka_get("client.id"), "relay");
}

Test(config, missing_optional_file_keeps_defaults_and_applies_overrides)
{
    char *const ov[] = {"relay.table=events"};
    int rc = config_load(&cfg, "/nonexistent/outbox-relay.conf", false, ov, 1, err, sizeof err);
    cr_assert_eq(rc, 0, "%s", err);
    cr_assert_str_eq(cfg.table, "events");
    cr_assert_str_eq(cfg.schema, "public");
}

Test(config, missing_required_file_is_enoent_naming_path)
{
    int rc = config_load(&cfg, "/nonexistent/outbox-relay.conf", true, NULL, 0, err,
                         sizeof err);
    cr_assert_eq(rc, -ENOENT);
    assert_err_has("/nonexistent/outbox-relay.conf");
}

Test(config, set_reports_key)
{
    cr_assert_eq(config_set(&cfg, "relay", "batch_size", "7", err, sizeof err), 0);
    cr_assert_eq(cfg.batch_size, 7);
    cr_assert_eq(config_set(&cfg, "relay", "batch_size", "x", err, sizeof err), -EINVAL);
    assert_err_has("relay.batch_size");
}

/* --- rejections ---------------------------------------------------------- */

Test(config, unknown_section)
{
    cr_assert_eq(load_text("[relay]\ntable = t\n[replay]\nbatch_size = 5\n", NULL, 0), -EINVAL);
    assert_err_has("replay.batch_size");
    assert_err_has(":4:");
}

Test(config, key_outside_section)
{
    cr_assert_eq(load_text("batch_size = 5\n", NULL, 0), -EINVAL);
    assert_err_has("batch_size");
    assert_err_has(":1:");
}

Test(config, unknown_key_in_file_names_section_key_and_line)
{
    cr_assert_eq(load_text("[relay]\n\nbacth_size = 5\n", NULL, 0), -EINVAL);
    assert_err_has("unknown key \"relay.bacth_size\"");
    assert_err_has(path);
    assert_err_has(":3:");
}

Test(config, unknown_key_in_override)
{
    cr_assert_eq(load_override("relay.bacth_size=5"), -EINVAL);
    assert_err_has("unknown key \"relay.bacth_size\"");
}

Test(config, syntax_error_reports_line)
{
    cr_assert_eq(load_text("[relay]\ntable = t\nthis line has no equals sign\n", NULL, 0),
                 -EINVAL);
    assert_err_has(":3:");
    assert_err_has("syntax error");

    cr_assert_eq(load_text("[relay\ntable = t\n", NULL, 0), -EINVAL);
    assert_err_has(":1:");
}

Test(config, syntax_error_before_bad_value_is_reported_first)
{
    cr_assert_eq(load_text("[relay]\ngarbage\nbatch_size = 0\n", NULL, 0), -EINVAL);
    assert_err_has(":2:");
    assert_err_has("syntax error");
}

Test(config, overlong_line_is_refused_not_split)
{
    char text[8192];
    snprintf(text, sizeof text, "[postgres]\nconninfo = host=db application_name=%04000d\n", 0);
    cr_assert_eq(load_text(text, NULL, 0), -EINVAL);
    assert_err_has(":2:");
    assert_err_has("longer than");
}

Test(config, line_at_the_length_limit_is_accepted)
{
    char text[512];
    /* 197 bytes: inih's default 200-byte buffer less "\r\n\0" */
    snprintf(text, sizeof text, "[postgres]\nconninfo = %0186d\n", 0);
    cr_assert_eq(load_text(text, NULL, 0), 0, "%s", err);
    cr_assert_eq(strlen(cfg.pg_conninfo), 186);
}

Test(config, int_with_trailing_junk)
{
    cr_assert_eq(load_override("relay.batch_size=12abc"), -EINVAL);
    assert_err_has("relay.batch_size");
    assert_err_has("1..100000");
    cr_assert_eq(load_override("relay.batch_size="), -EINVAL);
    assert_err_has("relay.batch_size");
    cr_assert_eq(cfg.batch_size, 2000);
}

Test(config, int_out_of_range)
{
    cr_assert_eq(load_override("relay.batch_size=0"), -EINVAL);
    assert_err_has("relay.batch_size");
    assert_err_has("1..100000");
    cr_assert_eq(load_override("relay.poll_interval_ms=9"), -EINVAL);
    assert_err_has("relay.poll_interval_ms");
    assert_err_has("10..3600000");
    cr_assert_eq(load_override("relay.shutdown_timeout_ms=99999999999999999999"), -EINVAL);
    assert_err_has("relay.shutdown_timeout_ms");
    cr_assert_eq(load_override("relay.reconnect_interval_ms=-1"), -EINVAL);
    assert_err_has("relay.reconnect_interval_ms");
}

Test(config, int_range_bounds_accepted)
{
    cr_assert_eq(load_override("relay.batch_size=100000"), 0, "%s", err);
    cr_assert_eq(load_override("relay.shutdown_timeout_ms=0"), 0, "%s", err);
    cr_assert_eq(load_override("relay.poll_interval_ms=3600000"), 0, "%s", err);
}

Test(config, injection_in_identifier_is_rejected)
{
    cr_assert_eq(load_text("[relay]\ntable = outbox\"; DROP TABLE x; --\n", NULL, 0), -EINVAL);
    assert_err_has("relay.table");
    cr_assert_str_eq(cfg.table, "outbox");

    cr_assert_eq(load_override("relay.schema=public; DROP"), -EINVAL);
    assert_err_has("relay.schema");
    cr_assert_eq(load_override("relay.notify_channel=chan-1"), -EINVAL);
    assert_err_has("relay.notify_channel");
    cr_assert_eq(load_override("relay.table="), -EINVAL);
    assert_err_has("relay.table");
}

Test(config, bad_topic_template)
{
    cr_assert_eq(load_override("relay.topic=outbox.${aggregate}"), -EINVAL);
    assert_err_has("relay.topic");
    assert_err_has("${aggregate}");
    cr_assert_eq(load_override("relay.topic=outbox.${event_type"), -EINVAL);
    assert_err_has("relay.topic");
}

Test(config, log_level_and_format)
{
    cr_assert_eq(load_override("log.level=verbose"), -EINVAL);
    assert_err_has("log.level");
    cr_assert_eq(load_override("log.format=xml"), -EINVAL);
    assert_err_has("log.format");
    cr_assert_eq(load_override("log.level=error"), 0, "%s", err);
    cr_assert_eq(cfg.log_level, LOG_LVL_ERROR);
}

Test(config, allow_row_security_is_a_boolean)
{
    cr_assert_eq(cfg.allow_row_security, 0, "the default refuses row-level security");
    cr_assert_eq(load_override("relay.allow_row_security=true"), 0, "%s", err);
    cr_assert_eq(cfg.allow_row_security, 1);
    char *text = dump(&cfg);
    cr_assert_not_null(strstr(text, "\nallow_row_security = true\n"), "%s", text);
    free(text);
    cr_assert_eq(load_override("relay.allow_row_security=false"), 0, "%s", err);
    cr_assert_eq(cfg.allow_row_security, 0);
    cr_assert_eq(load_override("relay.allow_row_security=yes"), -EINVAL);
    assert_err_has("relay.allow_row_security");
    assert_err_has("allowed: true, false");
}

Test(config, malformed_override)
{
    cr_assert_eq(load_override("relaybatch_size=5"), -EINVAL);
    assert_err_has("relaybatch_size");
    cr_assert_eq(load_override("relay.batch_size"), -EINVAL);
    assert_err_has("relay.batch_size");
    cr_assert_eq(load_override(".batch_size=5"), -EINVAL);
    assert_err_has(".batch_size");
    cr_assert_eq(load_override("relay.=5"), -EINVAL);
    assert_err_has("relay.");
}

Test(config, malformed_override_does_not_echo_value)
{
    cr_assert_eq(load_override("sasl_password=hunter2"), -EINVAL);
    cr_assert_null(strstr(err, "hunter2"), "%s", err);
    cr_assert_eq(load_override("kafka.sasl.pasword=hunter2"), -EINVAL);
    assert_err_has("kafka.sasl.pasword");
    cr_assert_null(strstr(err, "hunter2"), "%s", err);
}

Test(config, unknown_librdkafka_property)
{
    cr_assert_eq(load_text("[kafka]\nno.such.property = 1\n", NULL, 0), -EINVAL);
    assert_err_has("kafka.no.such.property");
    assert_err_has(":2:");
    cr_assert_eq(cfg.n_kafka, 0);
}

Test(config, malformed_librdkafka_value)
{
    cr_assert_eq(load_override("kafka.linger.ms=soon"), -EINVAL);
    assert_err_has("kafka.linger.ms");
    cr_assert_eq(load_override("kafka.compression.codec=rar"), -EINVAL);
    assert_err_has("kafka.compression.codec");
}

Test(config, acks_other_than_all_conflicts)
{
    cr_assert_eq(load_override("kafka.acks=1"), -EINVAL);
    cr_assert_str_eq(err, "kafka.acks=1 conflicts with the idempotent producer (needs acks=all)");
    config_free(&cfg);
    config_init(&cfg);
    cr_assert_eq(load_override("kafka.request.required.acks=0"), -EINVAL);
    assert_err_has("kafka.request.required.acks=0");
}

Test(config, acks_all_is_fine)
{
    char *const ov[] = {"kafka.acks=all", "kafka.request.required.acks=-1",
                        "kafka.enable.idempotence=true", "kafka.max.in.flight=5",
                        "kafka.retries=3", "kafka.queuing.strategy=fifo"};
    cr_assert_eq(config_load(&cfg, NULL, false, ov, 6, err, sizeof err), 0, "%s", err);
}

Test(config, idempotence_disabled_conflicts)
{
    cr_assert_eq(load_override("kafka.enable.idempotence=false"), -EINVAL);
    assert_err_has("kafka.enable.idempotence=false");
    assert_err_has("idempotent");
}

Test(config, other_idempotence_conflicts)
{
    const char *bad[][2] = {
        {"kafka.max.in.flight.requests.per.connection=6", "kafka.max.in.flight.requests"},
        {"kafka.max.in.flight=100", "kafka.max.in.flight=100"},
        {"kafka.retries=0", "kafka.retries=0"},
        {"kafka.message.send.max.retries=0", "kafka.message.send.max.retries=0"},
        {"kafka.transactional.id=relay-1", "kafka.transactional.id"},
        {"kafka.queuing.strategy=lifo", "kafka.queuing.strategy=lifo"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        config_free(&cfg);
        config_init(&cfg);
        cr_assert_eq(load_override(bad[i][0]), -EINVAL, "%s accepted", bad[i][0]);
        assert_err_has(bad[i][1]);
    }
}

Test(config, reload_check)
{
    struct relay_config next;
    config_init(&next);
    config_set(&next, "relay", "batch_size", "5", err, sizeof err);
    config_set(&next, "log", "level", "debug", err, sizeof err);
    cr_assert_eq(config_reload_check(&cfg, &next, err, sizeof err), 0, "%s", err);

    config_set(&next, "relay", "table", "events", err, sizeof err);
    cr_assert_eq(config_reload_check(&cfg, &next, err, sizeof err), -EINVAL);
    assert_err_has("relay.table");
    config_set(&next, "relay", "table", "outbox", err, sizeof err);

    config_set(&next, "kafka", "linger.ms", "1", err, sizeof err);
    cr_assert_eq(config_reload_check(&cfg, &next, err, sizeof err), -EINVAL);
    assert_err_has("kafka");
    config_free(&next);
}

/* --- secrets ------------------------------------------------------------- */

Test(config, secret_keys)
{
    cr_assert(config_key_is_secret("sasl.password"));
    cr_assert(config_key_is_secret("ssl.key.password"));
    cr_assert(config_key_is_secret("ssl.keystore.password"));
    cr_assert(config_key_is_secret("sasl.oauthbearer.client.secret"));
    cr_assert(config_key_is_secret("ssl.key.pem"));
    cr_assert(config_key_is_secret("some.future.Password"));
    cr_assert(config_key_is_secret("conninfo"));
    cr_assert_not(config_key_is_secret("bootstrap.servers"));
    cr_assert_not(config_key_is_secret("sasl.username"));
    cr_assert_not(config_key_is_secret("ssl.certificate.pem"));
}

static void assert_redacted(const char *in, const char *want, const char *secret)
{
    char *out = config_redact_conninfo(in);
    cr_assert_not_null(out);
    cr_assert_str_eq(out, want);
    cr_assert_null(strstr(out, secret), "%s leaks %s", out, secret);
    free(out);
}

Test(config, redact_keyword_value_form)
{
    assert_redacted("host=x password='a b' user=u", "host=x password=******** user=u", "a b");
    assert_redacted("password=hunter2", "password=********", "hunter2");
    assert_redacted("host = x  password = hunter2\tdbname=d",
                    "host = x  password = ********\tdbname=d", "hunter2");
    assert_redacted("password='it\\'s s3cret' host=h", "password=******** host=h", "s3cret");
    assert_redacted("sslpassword=k3y host=h", "sslpassword=******** host=h", "k3y");
    assert_redacted("dbname='host=h password=hunter2'", "dbname=********", "hunter2");
    assert_redacted("host=db dbname=app", "host=db dbname=app", "********");
    assert_redacted("", "", "********");
}

Test(config, redact_keyword_value_form_never_leaks_on_parse_error)
{
    assert_redacted("host=x password='hunter2", "host=x ********", "hunter2");
    assert_redacted("host='x password=hunter2", "********", "hunter2");
    assert_redacted("host=x password", "host=x ********", "password");
}

Test(config, redact_uri_form)
{
    assert_redacted("postgresql://user:pass@host/db?password=x&sslmode=require",
                    "postgresql://user:********@host/db?password=********&sslmode=require",
                    "pass@");
    assert_redacted("postgres://relay:s3cret@db1:5432,db2:5432/app",
                    "postgres://relay:********@db1:5432,db2:5432/app", "s3cret");
    assert_redacted("postgresql://relay@db/app?pass%77ord=s3cret",
                    "postgresql://relay@db/app?pass%77ord=********", "s3cret");
    assert_redacted("postgresql://u:p@ss/w@host/db", "postgresql://u:********@host/db", "ss/w");
    assert_redacted("postgresql://db:5432/app?sslmode=require",
                    "postgresql://db:5432/app?sslmode=require", "********");
}

Test(config, dump_redacts_secrets)
{
    char *const ov[] = {
        "postgres.conninfo=host=db user=relay password=pg-s3cret",
        "kafka.bootstrap.servers=k1:9092",
        "kafka.sasl.username=relay",
        "kafka.sasl.password=kafka-s3cret",
    };
    cr_assert_eq(config_load(&cfg, NULL, false, ov, 4, err, sizeof err), 0, "%s", err);
    char *out = dump(&cfg);
    cr_assert_null(strstr(out, "pg-s3cret"), "%s", out);
    cr_assert_null(strstr(out, "kafka-s3cret"), "%s", out);
    cr_assert_not_null(strstr(out, "conninfo = host=db user=relay password=********\n"), "%s",
                       out);
    cr_assert_not_null(strstr(out, "sasl.password = ********\n"), "%s", out);
    cr_assert_not_null(strstr(out, "sasl.username = relay\n"), "%s", out);
    cr_assert_not_null(strstr(out, "bootstrap.servers = k1:9092\n"), "%s", out);
    free(out);
}

Test(config, dump_lists_every_parameter)
{
    char *out = dump(&cfg);
    const char *want[] = {
        "[postgres]\n", "[kafka]\n", "[relay]\n", "[http]\n", "[log]\n",
        "conninfo = \n", "schema = public\n", "table = outbox\n",
        "topic = outbox.${aggregate_type}\n", "notify_channel = outbox_relay\n",
        "batch_size = 2000\n", "poll_interval_ms = 1000\n", "shutdown_timeout_ms = 10000\n",
        "reconnect_interval_ms = 1000\n", "listen = 127.0.0.1:8423\n", "level = info\n", "format = logfmt\n",
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        cr_assert_not_null(strstr(out, want[i]), "dump lacks \"%s\":\n%s", want[i], out);
    free(out);
}

Test(config, dump_reads_back_to_the_same_configuration)
{
    char *const ov[] = {"relay.table=events", "relay.batch_size=42", "log.level=debug",
                        "log.format=json", "kafka.bootstrap.servers=k1:9092",
                        "kafka.linger.ms=7", "http.listen=[::1]:9100"};
    cr_assert_eq(config_load(&cfg, NULL, false, ov, 7, err, sizeof err), 0, "%s", err);
    char *out = dump(&cfg);

    struct relay_config back;
    config_init(&back);
    write_file(out);
    cr_assert_eq(config_load(&back, path, true, NULL, 0, err, sizeof err), 0, "%s", err);
    cr_assert_str_eq(back.table, "events");
    cr_assert_eq(back.batch_size, 42);
    cr_assert_eq(back.log_level, LOG_LVL_DEBUG);
    cr_assert_eq(back.log_format, LOG_FORMAT_JSON);
    cr_assert_str_eq(back.http_listen, "[::1]:9100");
    cr_assert_eq(config_reload_check(&cfg, &back, err, sizeof err), 0, "%s", err);
    config_free(&back);
    free(out);
}

/* --- the debezium profile's converters ---------------------------------- */

static int load_debezium(char *const *extra, size_t n)
{
    char *ov[12] = {"relay.profile=debezium", "relay.capture=wal"};
    for (size_t i = 0; i < n; i++)
        ov[2 + i] = extra[i];
    return config_load(&cfg, NULL, false, ov, 2 + n, err, sizeof err);
}

Test(config, converters_parse_into_their_enum)
{
    char *const ok[] = {"relay.key_converter=json_with_schema", "relay.value_converter=json",
                        "relay.expand_json_payload=true",
                        "relay.additional_placement=t:envelope,p:partition"};
    cr_assert_eq(load_debezium(ok, 4), 0, "%s", err);
    cr_assert_eq(cfg.key_converter, EVENT_CONVERTER_JSON_SCHEMA);
    cr_assert_eq(cfg.value_converter, EVENT_CONVERTER_JSON);
    cr_assert(cfg.expand_json_payload);
}

Test(config, converters_outside_the_debezium_profile_are_refused)
{
    char *const ov[] = {"relay.value_converter=json"};
    cr_assert_eq(config_load(&cfg, NULL, false, ov, 1, err, sizeof err), -EINVAL);
    assert_err_has("relay.profile = debezium");
}

Test(config, expansion_and_envelope_need_a_json_value_converter)
{
    char *const expand[] = {"relay.expand_json_payload=true"};
    cr_assert_eq(load_debezium(expand, 1), -EINVAL);
    assert_err_has("relay.value_converter = json");
    char *const env[] = {"relay.additional_placement=t:envelope"};
    cr_assert_eq(load_debezium(env, 1), -EINVAL);
    assert_err_has("envelope placement");
}

Test(config, envelope_with_schemas_needs_the_topic_prefix)
{
    char *const env[] = {"relay.value_converter=json_with_schema",
                         "relay.additional_placement=t:envelope"};
    cr_assert_eq(load_debezium(env, 2), -EINVAL);
    assert_err_has("relay.connect_topic_prefix");
    char *const named[] = {"relay.value_converter=json_with_schema",
                           "relay.additional_placement=t:envelope",
                           "relay.connect_topic_prefix=dbserver1"};
    cr_assert_eq(load_debezium(named, 3), 0, "%s", err);
}

/* Streamed, Debezium's table keeps no dead row: the configuration shows the
 * halt that happens, and refuses a policy that cannot be followed. */
Test(config, debezium_streamed_halts_on_poison_and_says_so)
{
    cr_assert_eq(load_debezium(NULL, 0), 0, "%s", err);
    cr_assert_eq(cfg.on_poison, POISON_HALT);
    char *dump = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&dump, &len);
    config_dump(&cfg, out); /* what check-config prints */
    fclose(out);
    cr_assert(strstr(dump, "on_poison = halt"), "%s", dump);
    free(dump);
    config_free(&cfg);
    config_init(&cfg);
    char *const halt[] = {"relay.on_poison=halt"};
    cr_assert_eq(load_debezium(halt, 1), 0, "%s", err);
    cr_assert_eq(cfg.on_poison, POISON_HALT);
    config_free(&cfg);
    config_init(&cfg);
    char *const dead[] = {"relay.on_poison=dead_letter"};
    cr_assert_eq(load_debezium(dead, 1), -EINVAL);
    assert_err_has("relay.on_poison = dead_letter is not possible");
    config_free(&cfg);
    config_init(&cfg);
    char *const polled[] = {"relay.profile=debezium", "relay.capture=poll", "relay.on_poison=dead_letter"};
    cr_assert_eq(config_load(&cfg, NULL, false, polled, 3, err, sizeof err), 0, "%s", err);
    cr_assert_eq(cfg.on_poison, POISON_DEAD_LETTER, "polled, the view's columns keep dead rows");
}

/* --- the debezium profile, polled ---------------------------------------- */

Test(config, debezium_polled_claims_through_the_view)
{
    char *const ov[] = {"relay.profile=debezium", "relay.capture=poll", "relay.table=outbox",
                        "relay.additional_placement=tenant:header,part:partition"};
    cr_assert_eq(config_load(&cfg, NULL, false, ov, 4, err, sizeof err), 0, "%s", err);
    char buf[CONFIG_RELATION_MAX];
    cr_assert_str_eq(config_claim_relation(&cfg, buf), "outbox_relay");
    cr_assert_eq(config_placed_count(&cfg), 2);
    /* Log-based capture reads the table itself. */
    config_free(&cfg);
    config_init(&cfg);
    char *const wal[] = {"relay.profile=debezium", "relay.table=outbox",
                         "relay.additional_placement=tenant:header"};
    cr_assert_eq(config_load(&cfg, NULL, false, wal, 3, err, sizeof err), 0, "%s", err);
    cr_assert_str_eq(config_claim_relation(&cfg, buf), "outbox");
    /* ... and its statements read no placed_N column: the table has none. */
    cr_assert_eq(config_placed_count(&cfg), 0);
}

Test(config, other_columns_when_polled_need_the_debezium_profile)
{
    char *const ov[] = {"relay.column_payload=body"};
    cr_assert_eq(config_load(&cfg, NULL, false, ov, 1, err, sizeof err), -EINVAL);
    assert_err_has("relay.profile = debezium");
    char *const retention[] = {"relay.profile=debezium", "relay.capture=poll",
                               "relay.retention=7d"};
    cr_assert_eq(config_load(&cfg, NULL, false, retention, 3, err, sizeof err), -EINVAL);
    assert_err_has("relay.retention must be 0");
}
