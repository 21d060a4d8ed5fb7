/* Unit tests of relay/config/: the OUTBOX_RELAY_<SECTION>_<KEY> environment
 * variables, the layers (file, environment, -X) and the brokers `run` needs. */
#include "config_fixture.h"

/* --- the environment (OUTBOX_RELAY_<SECTION>_<KEY>) ------------------------ */

static int load_env(char *const *envp)
{
    return config_load_env(&cfg, envp, err, sizeof err);
}

Test(config, env_maps_sections_and_keys)
{
    char *const envp[] = {
        "PATH=/usr/bin",
        "OUTBOX_RELAY_POSTGRES_CONNINFO=host=db dbname=app",
        "OUTBOX_RELAY_KAFKA_BOOTSTRAP_SERVERS=k1:9092,k2:9092",
        "OUTBOX_RELAY_KAFKA_SASL_USERNAME=relay",
        "OUTBOX_RELAY_RELAY_TABLE=events",
        "OUTBOX_RELAY_RELAY_BATCH_SIZE=250",
        "OUTBOX_RELAY_RELAY_TOPIC=ev.${aggregate_type}",
        "OUTBOX_RELAY_HTTP_LISTEN=0.0.0.0:9100",
        "OUTBOX_RELAY_LOG_LEVEL=debug",
        "OUTBOX_RELAY_LOG_FORMAT=json",
        NULL,
    };
    cr_assert_eq(load_env(envp), 0, "%s", err);
    cr_assert_str_eq(cfg.pg_conninfo, "host=db dbname=app");
    cr_assert_str_eq(kafka_get("bootstrap.servers"), "k1:9092,k2:9092");
    cr_assert_str_eq(kafka_get("sasl.username"), "relay");
    cr_assert_str_eq(cfg.table, "events");
    cr_assert_eq(cfg.batch_size, 250);
    cr_assert_str_eq(cfg.topic, "ev.${aggregate_type}");
    cr_assert_str_eq(cfg.http_listen, "0.0.0.0:9100");
    cr_assert_eq(cfg.log_level, LOG_LVL_DEBUG);
    cr_assert_eq(cfg.log_format, LOG_FORMAT_JSON);
}

Test(config, env_leaves_other_variables_and_defaults_alone)
{
    char *const envp[] = {"HOME=/root", "PGHOST=db", "OUTBOX_RELAYX=1", "OUTBOX_RELAY", NULL};
    cr_assert_eq(load_env(envp), 0, "%s", err);
    cr_assert_str_eq(cfg.table, "outbox");
    cr_assert_str_eq(cfg.pg_conninfo, "");
    cr_assert_eq(cfg.n_kafka, 0);
    cr_assert_eq(config_load_env(&cfg, NULL, err, sizeof err), 0);
}

Test(config, env_ignores_the_test_tools_variables)
{
    char *const envp[] = {
        "OUTBOX_RELAY_TEST_PG=host=/tmp",  "OUTBOX_RELAY_TEST_KAFKA=127.0.0.1:9092",
        "OUTBOX_RELAY_BIN=/build/outbox-relay", "OUTBOX_RELAY_MOCK_BROKER=/build/mock",
        NULL,
    };
    cr_assert_eq(load_env(envp), 0, "%s", err);
    cr_assert_str_eq(cfg.pg_conninfo, "");
}

/* What the kubelet puts into every pod of a namespace with a Service named
 * outbox-relay (port 8423 named status) and one named outbox-relay-metrics
 * (UDP, for the variety): none of it is configuration. */
Test(config, env_ignores_kubernetes_service_links)
{
    char *const envp[] = {
        "OUTBOX_RELAY_SERVICE_HOST=10.96.12.7",
        "OUTBOX_RELAY_SERVICE_PORT=8423",
        "OUTBOX_RELAY_SERVICE_PORT_STATUS=8423",
        "OUTBOX_RELAY_PORT=tcp://10.96.12.7:8423",
        "OUTBOX_RELAY_PORT_8423_TCP=tcp://10.96.12.7:8423",
        "OUTBOX_RELAY_PORT_8423_TCP_PROTO=tcp",
        "OUTBOX_RELAY_PORT_8423_TCP_PORT=8423",
        "OUTBOX_RELAY_PORT_8423_TCP_ADDR=10.96.12.7",
        "OUTBOX_RELAY_METRICS_SERVICE_HOST=fd00:10:96::c",
        "OUTBOX_RELAY_METRICS_SERVICE_PORT=9000",
        "OUTBOX_RELAY_METRICS_PORT=udp://[fd00:10:96::c]:9000",
        "OUTBOX_RELAY_METRICS_PORT_9000_UDP=udp://[fd00:10:96::c]:9000",
        "OUTBOX_RELAY_METRICS_PORT_9000_UDP_PROTO=udp",
        "OUTBOX_RELAY_METRICS_PORT_9000_UDP_PORT=9000",
        "OUTBOX_RELAY_METRICS_PORT_9000_UDP_ADDR=fd00:10:96::c",
        "OUTBOX_RELAY_HTTP_PORT_9_SCTP=sctp://10.0.0.1:9",
        "OUTBOX_RELAY_RELAY_TABLE=events",
        NULL,
    };
    cr_assert_eq(load_env(envp), 0, "%s", err);
    cr_assert_str_eq(cfg.table, "events");
    cr_assert_eq(cfg.n_kafka, 0);
}

/* The same names with values Kubernetes never writes are an operator's
 * mistakes, and still rejected. */
Test(config, env_still_rejects_typos_that_look_like_service_links)
{
    const char *bad[] = {
        "OUTBOX_RELAY_HTTP_PORT=8423",               /* no such key; not a tcp:// URL */
        "OUTBOX_RELAY_SERVICE_HOST=db.internal",     /* a host name, not an address */
        "OUTBOX_RELAY_SERVICE_PORT=http",
        "OUTBOX_RELAY_PORT_8423_TCP=8423",
        "OUTBOX_RELAY_PORT_8423_TCP_PROTO=http",
        "OUTBOX_RELAY_PORT_X_TCP_PORT=8423",
        "OUTBOX_RELAY_PORT_8423_HTTP_PORT=8423",
        "OUTBOX_RELAY_RELAY_PORT=5432",
        "OUTBOX_RELAY_KAFKA_SERVICE_HOST_NAME=10.0.0.1",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *const envp[] = {(char *)bad[i], NULL};
        config_free(&cfg);
        config_init(&cfg);
        cr_expect_eq(load_env(envp), -EINVAL, "%s was accepted", bad[i]);
        cr_expect(strstr(err, "OUTBOX_RELAY_") != NULL,
                  "%s: the message does not name the variable: %s", bad[i], err);
    }
}

Test(config, env_rejects_an_unknown_key_naming_the_variable)
{
    char *const envp[] = {"OUTBOX_RELAY_RELAY_TABEL=events", NULL};
    cr_assert_eq(load_env(envp), -EINVAL);
    assert_err_has("OUTBOX_RELAY_RELAY_TABEL");
    assert_err_has("relay.tabel");
}

Test(config, env_rejects_an_unknown_section_naming_the_variable)
{
    char *const envp[] = {"OUTBOX_RELAY_POSTGRESS_CONNINFO=host=db", NULL};
    cr_assert_eq(load_env(envp), -EINVAL);
    assert_err_has("OUTBOX_RELAY_POSTGRESS_CONNINFO");
}

Test(config, env_rejects_a_section_without_a_key)
{
    char *const a[] = {"OUTBOX_RELAY_KAFKA=x", NULL};
    cr_assert_eq(load_env(a), -EINVAL);
    assert_err_has("OUTBOX_RELAY_KAFKA");
    char *const b[] = {"OUTBOX_RELAY_LOG_=x", NULL};
    cr_assert_eq(load_env(b), -EINVAL);
    assert_err_has("OUTBOX_RELAY_LOG_");
}

Test(config, env_rejects_lower_case_names)
{
    char *const envp[] = {"OUTBOX_RELAY_relay_table=events", NULL};
    cr_assert_eq(load_env(envp), -EINVAL);
    assert_err_has("OUTBOX_RELAY_relay_table");
}

Test(config, env_rejects_unknown_kafka_properties_and_bad_values)
{
    char *const a[] = {"OUTBOX_RELAY_KAFKA_BOOTSTRAP_SERVRES=k:9092", NULL};
    cr_assert_eq(load_env(a), -EINVAL);
    assert_err_has("OUTBOX_RELAY_KAFKA_BOOTSTRAP_SERVRES");
    assert_err_has("kafka.bootstrap.servres");

    char *const b[] = {"OUTBOX_RELAY_RELAY_BATCH_SIZE=0", NULL};
    cr_assert_eq(load_env(b), -EINVAL);
    assert_err_has("OUTBOX_RELAY_RELAY_BATCH_SIZE");
}

Test(config, env_error_does_not_echo_a_secret_value)
{
    char *const envp[] = {"OUTBOX_RELAY_POSTGRES_PASSWORD=hunter2", NULL};
    cr_assert_eq(load_env(envp), -EINVAL);
    cr_assert_null(strstr(err, "hunter2"), "%s", err);
}

Test(config, layers_file_then_environment_then_overrides)
{
    write_file("[relay]\n"
               "table = from_file\n"
               "schema = from_file\n"
               "batch_size = 10\n"
               "[log]\n"
               "level = warn\n");
    char *const envp[] = {"OUTBOX_RELAY_RELAY_TABLE=from_env",
                          "OUTBOX_RELAY_RELAY_BATCH_SIZE=20", NULL};
    char *const ov[] = {"relay.batch_size=30"};
    cr_assert_eq(config_load_layered(&cfg, path, true, envp, ov, 1, err, sizeof err), 0, "%s",
                 err);
    cr_assert_str_eq(cfg.schema, "from_file");    /* file only */
    cr_assert_str_eq(cfg.table, "from_env");      /* environment over file */
    cr_assert_eq(cfg.batch_size, 30);             /* -X over environment */
    cr_assert_eq(cfg.log_level, LOG_LVL_WARN);    /* file over default */
    cr_assert_str_eq(cfg.notify_channel, "outbox_relay"); /* default */
}

Test(config, layers_validate_once_after_the_last_layer)
{
    /* The environment sets a Kafka property that breaks idempotence and -X
     * repairs it: the result is what counts. */
    char *const envp[] = {"OUTBOX_RELAY_KAFKA_ACKS=1", NULL};
    char *const ov[] = {"kafka.acks=all"};
    cr_assert_eq(config_load_layered(&cfg, NULL, false, envp, ov, 1, err, sizeof err), 0, "%s",
                 err);
    cr_assert_str_eq(kafka_get("acks"), "all");

    struct relay_config bad;
    config_init(&bad);
    cr_assert_eq(config_load_layered(&bad, NULL, false, envp, NULL, 0, err, sizeof err),
                 -EINVAL);
    assert_err_has("kafka.acks");
    config_free(&bad);
}

Test(config, layers_need_no_file)
{
    char *const envp[] = {"OUTBOX_RELAY_POSTGRES_CONNINFO=", "OUTBOX_RELAY_RELAY_TABLE=t", NULL};
    cr_assert_eq(config_load_layered(&cfg, "/nonexistent/outbox-relay.conf", false, envp, NULL,
                                     0, err, sizeof err),
                 0, "%s", err);
    cr_assert_str_eq(cfg.table, "t");
}

Test(config, brokers_are_required_for_run_and_check_config)
{
    cr_assert_eq(config_require_brokers(&cfg, err, sizeof err), -EINVAL);
    assert_err_has("kafka.bootstrap.servers");
    cr_assert_eq(config_set(&cfg, "kafka", "bootstrap.servers", " , ", err, sizeof err), 0, "%s", err);
    cr_assert_eq(config_require_brokers(&cfg, err, sizeof err), -EINVAL, "a list of nothing");
    cr_assert_eq(config_set(&cfg, "kafka", "bootstrap.servers", "k1:9092", err, sizeof err), 0, "%s", err);
    cr_assert_eq(config_require_brokers(&cfg, err, sizeof err), 0, "%s", err);
}

Test(config, brokers_may_be_given_as_metadata_broker_list)
{
    cr_assert_eq(config_set(&cfg, "kafka", "metadata.broker.list", "k1:9092", err, sizeof err), 0, "%s", err);
    cr_assert_eq(config_require_brokers(&cfg, err, sizeof err), 0, "%s", err);
}
